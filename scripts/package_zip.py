"""The code for ``spark-submit --py-files``: ``build/txn_audit.zip`` (``make zip``).

The zip holds the same import names as the wheel: ``auditor`` and, from the top-level ``rules/``
folder, ``auditor.rules`` (setup.py's ``package_dir``), with the package data the code reads
(the rules' ``examples.json``). Compiled extensions stay out: an executor may run another
platform, and ``dump``'s compiled loop has a Python path that writes the same bytes.

    python scripts/package_zip.py build/txn_audit.zip
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# folder in the checkout -> its place in the zip (the import path)
LAYOUT = {"auditor": "auditor", "rules": "auditor/rules"}
PACKAGE_DATA = ("examples.json",)


def code_zip(dest: Path, root: Path = ROOT) -> Path:
    """Write the zip to ``dest`` (a file path) and return it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for folder, target in LAYOUT.items():
            src = root / folder
            for p in sorted(src.rglob("*")):
                if "__pycache__" in p.parts or not p.is_file():
                    continue
                if p.suffix == ".py" or p.name in PACKAGE_DATA:
                    z.write(p, f"{target}/{p.relative_to(src).as_posix()}")
    return dest


if __name__ == "__main__":
    out = code_zip(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "txn_audit.zip")
    print(out)
