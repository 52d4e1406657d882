"""Helpers for tests that run the job in a spark-submit subprocess."""

from __future__ import annotations

from pathlib import Path

from scripts import package_zip


def code_zip(dest_dir: Path) -> Path:
    """build/txn_audit.zip as ``make zip`` builds it (scripts/package_zip.py): the code for ``--py-files``."""
    return package_zip.code_zip(dest_dir / "txn_audit.zip")


def errors(stderr: str, keep: int = 6000) -> str:
    """stderr without Spark's INFO log lines (a failed run's traceback is drowned in them)."""
    return "\n".join(ln for ln in stderr.splitlines() if " INFO " not in ln)[-keep:]
