"""Names whose numbers Kafka could not have written, and paths that cannot be searched.

A partition is an int32 and an offset an int64 (``TopicPartition``, ``LogSegment``): a directory
``x-2147483648`` or a segment ``99999999999999999999.log`` in a shared data dir used to crash
every run (pyarrow ``ArrowInvalid``, ``OverflowError``). They are inventory rows with status
``out-of-range`` now, named on stderr, never read, and the rest of the audit is the one the clean
log dir gives.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import SAMPLE_LOGS
from auditor.cli.main import cli
from auditor.ingest.discovery import MAX_OFFSET, MAX_PARTITION, classify_file, discover, out_of_range, parse_partition_dir

SCENARIO = SAMPLE_LOGS / "hanging-late-write" / "broker-1"


def test_kafkas_limits_on_names():
    assert parse_partition_dir(f"t-{MAX_PARTITION}") == ("t", MAX_PARTITION, "live")
    assert parse_partition_dir(f"t-{MAX_PARTITION + 1}") is None
    assert "beyond Kafka's limit" in out_of_range(f"t-{MAX_PARTITION + 1}")
    assert out_of_range(f"t-{MAX_PARTITION + 1}.{'a' * 32}-delete")  # a retired replica's name too
    assert out_of_range(f"t-{MAX_PARTITION}") is None and out_of_range("orders") is None
    assert classify_file(f"{MAX_OFFSET:020d}.log")[:3] == ("segment", "live", MAX_OFFSET)
    assert classify_file("99999999999999999999.log")[0] == "unknown"
    assert "offset 99999999999999999999" in out_of_range("99999999999999999999.snapshot")


def test_a_path_that_cannot_be_searched_is_a_row(monkeypatch, tmp_path):
    """``dump DIR/FILE`` where DIR cannot be searched: ``is_file`` raises EACCES (root is not
    refused by the kernel, so the refusal is simulated)."""
    target = tmp_path / "d" / "00000000000000000000.log"
    real = Path.is_file

    def is_file(self):
        if self == target:
            raise PermissionError(13, "Permission denied")
        return real(self)

    monkeypatch.setattr(Path, "is_file", is_file)
    rows = list(discover([str(target)]))
    assert [(r.kind, r.note) for r in rows] == [("unreadable-dir", "cannot stat: Permission denied")]


@pytest.mark.spark
def test_stray_names_are_listed_and_the_audit_goes_on(spark, tmp_path):
    clean = tmp_path / "clean" / "broker-1"
    shutil.copytree(SCENARIO, clean)
    stray = tmp_path / "stray" / "broker-1"
    shutil.copytree(SCENARIO, stray)
    seg = next((stray / "transfers-1").glob("*.log"))
    for name in ("x-2147483648", "y-99999999999999999999"):
        (stray / name).mkdir()
        shutil.copy(seg, stray / name / seg.name)
    shutil.copy(seg, stray / "transfers-1" / "99999999999999999999.log")

    def scan(root: Path) -> tuple[int, list, str]:
        res = CliRunner().invoke(cli, ["scan", str(root), "--no-keep-tables", "--format", "json"])
        return res.exit_code, json.loads(res.stdout)["findings"], res.stderr

    code, found, err = scan(stray)
    ref_code, ref, _ = scan(clean)
    assert code == ref_code == 1  # the late write: critical
    assert "Traceback" not in err
    for name in ("x-2147483648", "y-99999999999999999999", "99999999999999999999.log"):
        assert any(line.startswith("out-of-range") and name in line for line in err.splitlines()), err

    def same(fs):
        return sorted((f["rule"], f["kind"], f["topic"], f["partition"], f["first_offset"]) for f in fs)

    assert same(found) == same(ref) and found
