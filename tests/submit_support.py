"""Helpers for tests that run the job in a spark-submit subprocess."""

from __future__ import annotations

import zipfile
from pathlib import Path

from conftest import PROJECT


def code_zip(dest_dir: Path) -> Path:
    """build/txn_audit.zip as ``make zip`` builds it: the code for ``--py-files``."""
    pkg = dest_dir / "txn_audit.zip"
    with zipfile.ZipFile(pkg, "w") as z:
        for sub in ("auditor", "rules"):
            for p in (PROJECT / sub).rglob("*.py"):
                z.write(p, p.relative_to(PROJECT).as_posix())
    return pkg


def errors(stderr: str, keep: int = 6000) -> str:
    """stderr without Spark's INFO log lines (a failed run's traceback is drowned in them)."""
    return "\n".join(ln for ln in stderr.splitlines() if " INFO " not in ln)[-keep:]
