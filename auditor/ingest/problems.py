"""A decode problem found while ingesting one file."""

from __future__ import annotations

from dataclasses import dataclass

# a record of an internal topic whose key or value cannot be decoded, in a batch that is itself valid
# (size, CRC, offsets): Kafka's log recovery validates batches, never coordinator record contents, so
# this is reported but never where the live log is cut (auditor.model.livelog.RECOVERY_TRUNCATES)
BAD_RECORD = "bad-record"


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
