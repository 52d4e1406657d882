"""Assemble docs/tables.md from the per-decoder sections in docs/_parts/ (sorted by name)."""

from pathlib import Path

root = Path(__file__).resolve().parents[1] / "docs"
parts = sorted((root / "_parts").glob("*.md"))
(root / "tables.md").write_text("\n\n".join(p.read_text().strip() for p in parts) + "\n")
print(f"docs/tables.md from {len(parts)} parts")
