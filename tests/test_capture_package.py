"""The capture package (``scripts/capture/``, run as ``scripts/capture_scenarios.py``) against the
captures it made: no broker is started here.

* every module imports, and the registry names exactly the scenarios and mutations whose captures
  are in ``sample_logs/`` (each capture's expected.json says which command made it), on the Kafka
  version the capture was made with;
* both commands (the script, ``python -m scripts.capture``) list them, in registry order;
* the mutations, run again on the committed base captures into a temporary directory, give the
  committed mutated captures byte for byte (the copies, the changed bytes, the CRC-32C recomputed
  with auditor.formats, expected.json);
* the inspection the scenarios steer by (auditor.formats decoders over live segments) reads from
  the committed log dirs what the capture recorded, with the parser it had then, in
  ``capture_checks`` before the copy.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import shutil
import subprocess
import sys

import pytest

import scripts.capture
from conftest import PROJECT, SAMPLE_LOGS
from scripts.capture.bookkeeping import tp
from scripts.capture.driver import run_mutation
from scripts.capture.inspection import batch_at, checkpoint_offsets, scan_partition_dir
from scripts.capture.mutations import MUTATIONS
from scripts.capture.paths import GENERATED_BY
from scripts.capture.registry import all_scenarios


def _captures() -> dict[str, dict]:
    """sample_logs/<name>/expected.json of every capture the package made, by scenario name."""
    out = {}
    for exp in sorted(SAMPLE_LOGS.glob("*/expected.json")):
        e = json.loads(exp.read_text())
        if (e.get("generated_by") or "").startswith(f"{GENERATED_BY} --only "):
            out[exp.parent.name] = e
    return out


def test_every_module_imports():
    names = [m.name for m in pkgutil.iter_modules(scripts.capture.__path__) if m.name != "__main__"]
    assert {"registry", "context", "driver", "inspection", "mutations", "transactions", "compaction"} <= set(names)
    for name in names:
        importlib.import_module(f"scripts.capture.{name}")


def test_the_registry_names_every_committed_capture():
    captures = _captures()
    scenarios = all_scenarios()
    assert set(captures) == set(scenarios) | set(MUTATIONS)
    for name, e in captures.items():
        assert e["scenario"] == name
        if name in scenarios:
            assert e["generated_by"] == f"{GENERATED_BY} --only {name}"
            assert e["kafka_version"] == scenarios[name].version, name
        else:
            base = MUTATIONS[name][0]
            assert e["generated_by"] == f"{GENERATED_BY} --only {name} (after --only {base})"
            assert e["derived_from"] == base


@pytest.mark.parametrize("command", [["scripts/capture_scenarios.py"], ["-m", "scripts.capture"]])
def test_the_commands_list_the_registry(command):
    proc = subprocess.run([sys.executable, *command, "--list"], cwd=PROJECT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines()]
    assert listed == list(all_scenarios()) + list(MUTATIONS)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_mutation_gives_its_committed_capture_byte_for_byte(name, tmp_path):
    base = MUTATIONS[name][0]
    shutil.copytree(SAMPLE_LOGS / base, tmp_path / base)
    run_mutation(name, tmp_path)
    want = sorted(p.relative_to(SAMPLE_LOGS / name) for p in (SAMPLE_LOGS / name).rglob("*") if p.is_file())
    got = sorted(p.relative_to(tmp_path / name) for p in (tmp_path / name).rglob("*") if p.is_file())
    assert got == want
    for rel in want:
        assert (tmp_path / name / rel).read_bytes() == (SAMPLE_LOGS / name / rel).read_bytes(), rel
    assert (tmp_path / base / "expected.json").read_bytes() == (SAMPLE_LOGS / base / "expected.json").read_bytes()


SCANNED = ("segments", "batches", "empty_batches", "markers", "tombstones", "delete_horizon_batches", "records",
           "log_end", "deleted_files", "cleaned_or_swap_files")


@pytest.mark.parametrize("name", ["compacted-transactions", "compacted-cleaner-lag", "compacted-hanging"])
def test_inspection_reads_what_the_capture_recorded(name):
    exp = json.loads((SAMPLE_LOGS / name / "expected.json").read_text())
    recorded = exp["capture_checks"]["compaction_at_capture"]
    for broker, parts in recorded.items():
        checkpoints = checkpoint_offsets(SAMPLE_LOGS / name / broker / "cleaner-offset-checkpoint")
        for key, st in parts.items():
            got = scan_partition_dir(SAMPLE_LOGS / name / broker / key)
            offsets = got.pop("_offsets")
            assert {k: got[k] for k in SCANNED} == {k: st[k] for k in SCANNED}, (broker, key)
            assert checkpoints.get(key) == st["cleaner_checkpoint"], (broker, key)
            assert (got["log_end"] or 0) - len(offsets) == st["offset_holes"], (broker, key)
    if name == "compacted-cleaner-lag":
        checks = exp["capture_checks"]
        k = tp("kvlag", 0)
        at_marker = {b: batch_at(SAMPLE_LOGS / name / b / k, checks["marker_offset"]) for b in checks["batch_at_marker"]}
        assert at_marker == checks["batch_at_marker"]
        assert at_marker["broker-3"]["control_type"] == "ABORT" and at_marker["broker-1"]["record_count"] == 0


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_a_missing_base_capture_is_named(name, tmp_path):
    base = MUTATIONS[name][0]
    with pytest.raises(RuntimeError, match=f"needs the capture {base}: run --only {base} first"):
        run_mutation(name, tmp_path)
    assert not (tmp_path / name).exists()
