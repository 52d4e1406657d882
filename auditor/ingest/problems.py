"""A decode problem found while ingesting one file."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Problem:
    """Where and why a file stopped (or partly failed) decoding.

    ``fatal`` problems stop the file (framing lost); others (a bad CRC, one
    undecodable record of an internal topic) are noted and decoding goes on.
    """

    kind: str
    position: int
    message: str
    fatal: bool = True

    def row(self, context: dict) -> dict:
        return {
            **context,
            "_problem_kind": self.kind,
            "_problem_position": self.position,
            "_problem_message": self.message,
        }
