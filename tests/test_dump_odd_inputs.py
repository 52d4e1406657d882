"""``dump`` on inputs that used to be silent or repetitive.

A KRaft snapshot is read by three decoders (its batches, its metadata records, its producer-id
blocks); a truncated one used to print the same problem three times. A directory named like a
segment (``00000000000000000000.log/``) used to print nothing and exit 0, while ``scan`` listed
it: ``dump`` now names it as skipped and exits 1, whether the directory is given directly or
found in the partition directory given.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from conftest import SAMPLE_LOGS
from auditor.cli.main import cli
from auditor.ingest.discovery import discover

SNAPSHOT_DIR = SAMPLE_LOGS / "many-producers" / "broker-1" / "__cluster_metadata-0"


def test_truncated_kraft_snapshot_problem_is_said_once(tmp_path):
    src = sorted(SNAPSHOT_DIR.glob("*.checkpoint"))[0]
    d = tmp_path / "__cluster_metadata-0"
    d.mkdir()
    cut = d / src.name
    cut.write_bytes(src.read_bytes()[:300])
    res = CliRunner().invoke(cli, ["dump", str(cut)])
    assert res.exit_code == 1
    lines = [ln for ln in res.stderr.splitlines() if str(cut) in ln]
    assert len(lines) == 1, res.stderr
    assert "truncated" in lines[0] and "at byte" in lines[0]
    assert res.stdout.count('"type": "batch"') >= 1  # what precedes the cut is still dumped


def _segment_named_dir(tmp_path: Path) -> Path:
    part = tmp_path / "orders-0"
    (part / "00000000000000000000.log").mkdir(parents=True)
    return part / "00000000000000000000.log"


def test_directory_named_like_a_segment_is_named_when_given(tmp_path):
    odd = _segment_named_dir(tmp_path)
    for given in (odd, odd.parent):
        rows = list(discover([str(given)]))
        assert [(r.path, r.kind, r.size) for r in rows] == [(str(odd), "segment", -1)], given
        assert "a directory, not a regular file" in rows[0].note
        res = CliRunner().invoke(cli, ["dump", str(given)])
        assert res.exit_code == 1, given
        assert f"skipped {odd}" in " ".join(res.stderr.split()), res.stderr
        assert res.stdout == ""


def test_directory_named_like_a_segment_beside_real_segments(tmp_path):
    """In a partition directory with real files it is one more row; the real segment is dumped."""
    src = SAMPLE_LOGS / "hanging-late-write" / "broker-1" / "transfers-1"
    part = tmp_path / "transfers-1"
    part.mkdir()
    seg = sorted(src.glob("*.log"))[0]
    (part / seg.name).write_bytes(seg.read_bytes())
    (part / "00000000000000099999.log").mkdir()
    res = CliRunner().invoke(cli, ["dump", str(part)])
    assert res.exit_code == 1
    assert "00000000000000099999.log" in res.stderr and "not a regular file" in res.stderr
    assert res.stdout.count('"type": "batch"') > 0
