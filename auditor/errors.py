"""Error types shared by every decoder.

A decoder never guesses past bad bytes: it raises :class:`DecodeError` carrying
the byte position of the first problem, so the inventory can tell an operator
exactly where a file went wrong while the rest of the audit goes on.
"""

from __future__ import annotations

import os
import re


class DecodeError(ValueError):
    """Bytes that do not follow the Kafka format they claim to be.

    ``position`` is the absolute byte offset (in the file being decoded, when the
    caller knows it) of the first byte that could not be accepted.
    ``kind`` is a short stable token (``truncated``, ``bad-crc``, ``bad-length``,
    ``unknown-magic``, ``unknown-version``, ``inflate-limit``, ``corrupt``,
    ``foreign``) that tables and tests can match on.
    """

    def __init__(self, message: str, position: int = -1, kind: str = "corrupt") -> None:
        super().__init__(message)
        self.message = message
        self.position = position
        self.kind = kind

    def at(self, base: int) -> "DecodeError":
        """Return a copy whose position is shifted by ``base`` (relative -> absolute)."""
        pos = self.position + base if self.position >= 0 else base
        return DecodeError(self.message, pos, self.kind)

    def __str__(self) -> str:  # pragma: no cover - formatting only
        where = f" at byte {self.position}" if self.position >= 0 else ""
        return f"{self.kind}{where}: {self.message}"


class TruncatedError(DecodeError):
    """Input ended inside a structure (normal for an active segment after a crash)."""

    def __init__(self, message: str, position: int = -1) -> None:
        super().__init__(message, position, "truncated")


class EngineStartError(Exception):
    """The Spark driver JVM did not start (a JVM option it refuses, too small a heap, no Java):
    the command line reports it as one line, with what the JVM said, and exits with status 2."""


class OutputError(Exception):
    """An output directory (ingested tables, findings) could not be written: read-only, not
    permitted, or the disk filled up. Nothing was replaced: ``out`` holds what it held before.
    The command line reports it as one line naming ``out`` and exits with status 2."""

    def __init__(self, out: object, reason: str) -> None:
        super().__init__(f"cannot write {out}: {reason}")
        self.out = str(out)
        self.reason = reason

    #: what the JVM says when a Spark task's write fails for the file system's sake (java.io's
    #: IOException messages carry the C library's strerror text); anything else Spark raises
    #: while writing stays the error it is
    JVM_REASONS = ("No space left on device", "Disk quota exceeded", "Read-only file system")

    @classmethod
    def of_jvm(cls, out: object, exc: BaseException) -> "OutputError | None":
        """The error of a Spark write into ``out`` that failed because the file system is full or
        read-only (Py4J's error text holds the Java stack trace), else None."""
        text = str(exc)
        for reason in cls.JVM_REASONS:
            if reason in text:
                return cls(out, f"{reason} (Spark writing a table); nothing was replaced")
        return None

    @classmethod
    def of(cls, out: object, exc: OSError) -> "OutputError":
        where = f" (writing {exc.filename})" if exc.filename and str(exc.filename) != str(out) else ""
        reason = exc.strerror or str(exc)
        # Arrow's I/O errors (a Parquet writer's) give the C library's errno inside a sentence of
        # their own: "Error writing bytes to file. Detail: [errno 28] No space left on device"
        m = re.search(r"\[errno (\d+)\]", reason)
        if m:
            reason = f"{os.strerror(int(m.group(1)))} (writing a table's Parquet file)"
        return cls(out, f"{reason}{where}; nothing was replaced")
