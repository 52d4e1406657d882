"""``txn-audit dump``: structured kafka-dump-log, driven through click."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from builders import data_batch, marker
from conftest import REAL_LOGS
from auditor.cli.main import cli

NOVA = REAL_LOGS / "NOVA-RICS-Open-Lab__agentic-data-pipelines" / "broker" / "data"
CMD = NOVA / "_confluent-ksql-agentic_ksql__command_topic-0" / "00000000000000000000.log"
TXN = NOVA / "__transaction_state-4" / "00000000000000000000.log"


def _jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.real_logs
def test_dump_batches_with_kafka_field_names():
    res = CliRunner().invoke(cli, ["dump", str(CMD)])
    assert res.exit_code == 0, res.output
    objs = _jsonl(res.stdout)
    assert len(objs) == 18 and {o["type"] for o in objs} == {"batch"}
    for key in ("base_offset", "last_offset", "producer_id", "producer_epoch", "base_sequence", "last_sequence",
                "is_transactional", "is_control", "control_type", "coordinator_epoch", "partition_leader_epoch",
                "crc_valid", "compression", "position", "size"):
        assert key in objs[0]
    markers = [o for o in objs if o["is_control"]]
    assert [m["control_type"] for m in markers] == ["COMMIT"] * 9
    assert all(m["coordinator_epoch"] == 0 and m["base_sequence"] == -1 for m in markers)
    # positions are cumulative byte offsets: each batch starts where the previous ended
    assert all(a["position"] + a["size"] == b["position"] for a, b in zip(objs, objs[1:]))
    assert objs[-1]["position"] + objs[-1]["size"] == CMD.stat().st_size


@pytest.mark.real_logs
def test_dump_records_decodes_transaction_log():
    res = CliRunner().invoke(cli, ["dump", "--records", str(TXN)])
    assert res.exit_code == 0, res.output
    objs = _jsonl(res.stdout)
    txn = [o for o in objs if o["type"] == "transaction_log"]
    assert len(txn) == 36 and len([o for o in objs if o["type"] == "batch"]) == 36
    assert {o["transactional_id"] for o in txn} == {"agentic_ksql_"}
    assert txn[0]["state"] == "Empty" and txn[-1]["state"] == "CompleteCommit"


def test_dump_records_keep_the_records_own_topic_partition_and_broker_id():
    """A context column a table's decoder fills too (a committed offset's topic and partition, a
    metadata record's broker id) is the record's own in a dump line; the file's topic and partition
    are then ``log_topic`` / ``log_partition`` (no other context column is on a line)."""
    from conftest import SAMPLE_LOGS

    commits = sorted(SAMPLE_LOGS.glob("consumer-offsets-hanging/broker-1/__consumer_offsets-*/0*.log"))
    metadata = SAMPLE_LOGS / "clean" / "broker-1" / "__cluster_metadata-0" / "00000000000000000000.log"
    res = CliRunner().invoke(cli, ["dump", "--records", *map(str, commits), str(metadata)])
    assert res.exit_code == 0, res.output
    objs = _jsonl(res.stdout)
    offsets = [o for o in objs if o["type"] == "offset_commits"]
    assert offsets and {(o["topic"], o["partition"]) for o in offsets} == {("input", 0)}
    brokers = [o for o in objs if o["type"] == "metadata_records" and o["record_type"] == "REGISTER_BROKER_RECORD"]
    assert brokers and all(o["broker_id"] == json.loads(o["data_json"])["brokerId"] for o in brokers)
    assert {o["log_topic"] for o in offsets} == {"__consumer_offsets"}
    assert not any(k.startswith("log_") and k not in ("log_topic", "log_partition") for o in objs for k in o)
    assert not any("log_topic" in o for o in brokers)


def test_dump_records_of_a_data_topic(tmp_path):
    d = tmp_path / "orders-0"
    d.mkdir()
    seg = d / "00000000000000000000.log"
    seg.write_bytes(data_batch(0, 3, producer_id=9, producer_epoch=2, base_sequence=40, transactional=True)
                    + marker(3, 9, 2, commit=False, coordinator_epoch=6))
    res = CliRunner().invoke(cli, ["dump", "--records", str(seg)])
    assert res.exit_code == 0, res.output
    objs = _jsonl(res.stdout)
    recs = [o for o in objs if o["type"] == "record"]
    assert [(r["offset"], r["sequence"], r["key_size"]) for r in recs] == [(0, 40, 2), (1, 41, 2), (2, 42, 2)]
    m = [o for o in objs if o["type"] == "batch" and o["is_control"]][0]
    assert (m["control_type"], m["coordinator_epoch"], m["producer_epoch"]) == ("ABORT", 6, 2)


@pytest.mark.real_logs
def test_dump_reports_bad_input_on_stderr_and_goes_on(tmp_path):
    d = tmp_path / "orders-0"
    d.mkdir()
    good = data_batch(0, 2)
    cut = d / "00000000000000000000.log"
    cut.write_bytes(good + data_batch(2, 2)[:-7])
    junk = tmp_path / "notes.bin"
    junk.write_bytes(b"hello, not kafka")
    res = CliRunner().invoke(cli, ["dump", str(cut), str(junk), str(CMD)])
    assert res.exit_code == 1
    assert f"{cut}" in res.stderr and f"byte {len(good)}" in res.stderr and "truncated" in res.stderr
    assert "notes.bin" in res.stderr
    objs = _jsonl(res.stdout)
    assert len(objs) == 1 + 18  # the good batch of the cut file, and every batch of the healthy file


@pytest.mark.real_logs
def test_dump_table_format():
    res = CliRunner().invoke(cli, ["dump", "--format", "table", str(CMD)])
    assert res.exit_code == 0
    assert res.stdout.count("COMMIT") == 9


@pytest.mark.real_logs
def test_plain_dump_argv_runs_without_click_and_others_go_to_click(tmp_path):
    from auditor.cli.main import _plain_dump

    f = str(CMD)
    assert _plain_dump(["dump", f]) == ([f], False)
    assert _plain_dump(["dump", "--records", f, f]) == ([f, f], True)
    assert _plain_dump(["dump", f, "--records"]) == ([f], True)
    for args in (["dump"], ["dump", "--records"], ["dump", "--format", "jsonl", f], ["dump", "-h"], ["dump", "--", f],
                 ["dump", "-"], ["dump", ""], ["tables", f], [], ["dump", "--format=table", f]):
        assert _plain_dump(args) is None, args


@pytest.mark.real_logs
def test_plain_dump_writes_what_the_click_command_writes(tmp_path):
    """Whole processes: ``dump FILE...`` (click-free) and ``dump --format jsonl FILE...`` (click)
    write the same bytes, the same problems and the same exit status, records or not."""
    import subprocess
    import sys

    from conftest import PROJECT

    d = tmp_path / "orders-0"
    d.mkdir()
    cut = d / "00000000000000000000.log"
    cut.write_bytes(data_batch(0, 2) + marker(2, 7, 1, commit=False) + data_batch(3, 2)[:-7])
    for extra in ([], ["--records"]):
        got = [subprocess.run([sys.executable, "-m", "auditor.cli.main", "dump", *fmt, *extra, str(cut), str(TXN)],
                              capture_output=True, cwd=PROJECT) for fmt in ([], ["--format", "jsonl"])]
        assert got[0].returncode == got[1].returncode == 1
        assert got[0].stdout == got[1].stdout and got[0].stdout
        assert got[0].stderr == got[1].stderr and b"truncated" in got[0].stderr


def _sample_segments() -> "list[str]":
    from conftest import SAMPLE_LOGS

    return sorted(str(p) for p in SAMPLE_LOGS.rglob("*.log") if p.stat().st_size and p.name[0].isdigit())


def _dump_process(args: "list[str]", env_extra: "dict | None" = None, script: "str | None" = None):
    import os
    import subprocess
    import sys

    env = {**os.environ, **(env_extra or {})}
    cmd = [sys.executable, "-c", script, *args] if script else [sys.executable, "-m", "auditor.cli.main", *args]
    return subprocess.run(cmd, capture_output=True, env=env, timeout=300)


def test_a_dump_of_many_files_in_two_processes_writes_what_one_writes():
    """``txn-audit dump`` of 1-64 MiB of files forks a second process for the later files
    (auditor.dump._split): stdout byte for byte, stderr and the exit status are one process's."""
    from auditor.dump import _split

    files = _sample_segments()
    total = sum(Path(f).stat().st_size for f in files)
    assert _split.MIN_BYTES <= total <= _split.MAX_BYTES and len(files) > 100
    for records in ([], ["--records"]):
        one = _dump_process(["dump", *records, *files], {"TXN_AUDIT_DISABLE": "dump_split"})
        two = _dump_process(["dump", *records, *files])
        assert one.returncode == two.returncode and one.stdout and two.stdout == one.stdout, records
        assert two.stderr == one.stderr, records
    # and it did fork: the plain dump, its fork counted
    counted = _dump_process(["dump", "--records", *files], script=_COUNT_FORKS)
    assert counted.stdout == two.stdout
    assert counted.stderr.decode().splitlines()[-1] == "forks: 1"


# runs auditor.cli.main.main() with auditor.dump._split.fork counted (said on stderr at exit: the
# dump's own end, which skips the interpreter's, says it first)
_COUNT_FORKS = """
import sys
from auditor.dump import _run, _split
real, calls = _split.fork, []
def fork(work):
    calls.append(1)
    return real(work)
_split.fork = fork
end = _run._end_process
def say_forks():
    sys.stderr.write(f"forks: {len(calls)}\\n")
def end_process(code):
    say_forks()
    end(code)
_run._end_process = end_process
from auditor.cli.main import main
sys.argv = ["txn-audit", *sys.argv[1:]]
try:
    main()
finally:
    say_forks()
"""


def test_a_two_process_dump_stops_when_its_reader_goes_away(tmp_path):
    """``dump ... | head -1``: the first process ends on the closed pipe and takes the second with
    it (status 1, as one process ends), leaving no process behind."""
    import shutil
    import subprocess
    import sys

    from auditor.dump import _split

    files = _sample_segments()
    # a last file under this test's own directory: the command lines to look for afterwards
    mark = tmp_path / "orders-0" / "00000000000000000000.log"
    mark.parent.mkdir()
    shutil.copyfile(files[0], mark)
    files.append(str(mark))
    assert _split.split_at([type("F", (), {"path": f})() for f in files],
                           {f: {"size": Path(f).stat().st_size} for f in files}, True, ("__cluster_metadata",)) is not None
    p = subprocess.Popen([sys.executable, "-m", "auditor.cli.main", "dump", "--records", *files],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()
    p.stdout.close()
    assert p.wait(timeout=60) == 1 and first.startswith(b'{"type": "batch"')
    p.stderr.close()
    # the first process killed and reaped the second before it exited (it would still be dumping)
    left = subprocess.run(["pgrep", "-f", str(mark)], capture_output=True, text=True).stdout.split()
    assert left == [], left
