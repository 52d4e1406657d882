"""Verify the fix, end to end on a live broker, with Kafka's own tool.

The loop an operator runs after a hanging-transaction alert, on one real KRaft broker per module
(scripts/kafka/harness.py, jars from Maven Central via scripts/kafka/fetch.sh):

1. the shipped capture's scenario ``hanging-late-write`` (``scripts.capture.transactions``, run
   through the capture registry on the Kafka version it is pinned to, 3.5.2: before KIP-890
   verification, so the broker still appends the late batch) makes the anomaly: an aborted
   transaction on ``transfers-0``, then a raw Produce of a transactional batch with the same
   producer id/epoch after the ABORT marker (``scripts.capture.raw.late_write``), which no marker
   will ever close. The broker itself confirms it: its last stable offset is pinned there.
2. the running broker's log dir is copied and ``txn-audit scan COPY --format json --as-of now
   --bootstrap-server 127.0.0.1:PORT`` must report a critical ``hanging-transaction/late-write``
   on transfers-0 whose first remediation command is ``kafka-transactions.sh --bootstrap-server
   127.0.0.1:PORT abort --topic transfers --partition 0 --start-offset O`` -- kept as before.json;
3. that exact command is run, the program name replaced by the class behind kafka-transactions.sh
   (``org.apache.kafka.tools.TransactionsCommand``, from the broker's own jars): it must exit 0;
4. the broker's last stable offset (ListOffsets read_committed) must catch up with its high
   watermark (read_uncommitted);
5. the broker is stopped cleanly, its log dir copied again, and ``txn-audit scan COPY2 --format
   json --baseline before.json --as-of now`` must exit 0 with the late write among the resolved
   findings and nothing critical/error left on the partition or new; ``txn-audit dump`` of the copy
   must show the ABORT marker the tool wrote.

Everything expected comes from the scenario's own bookkeeping (where the late batch landed) and
from the broker (ListOffsets), never from the auditor.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.capture import context as capture_context
from scripts.capture import transactions  # noqa: F401 - registers the hanging-late-write scenario
from scripts.capture.registry import SCENARIOS
from scripts.kafka.harness import java_command

pytestmark = pytest.mark.spark

SCENARIO = SCENARIOS["hanging-late-write"]
TXN_AUDIT = Path(sys.executable).parent / "txn-audit"  # .venv/bin/txn-audit
#: the class kafka-transactions.sh runs (bin/kafka-transactions.sh: kafka-run-class.sh org.apache.kafka.tools.TransactionsCommand)
TRANSACTIONS_COMMAND = "org.apache.kafka.tools.TransactionsCommand"
SEVERE = ("critical", "error")


def _run(argv: list, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _scan(copy: Path, tables: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = _run([TXN_AUDIT, "scan", copy, "--format", "json", "--as-of", "now", "--tables", tables, "--quiet", *extra])
    assert proc.returncode in (0, 1, 3), f"scan failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc, json.loads(proc.stdout)


def _copy_if_present(src: str, dst: str) -> None:
    """copy2, skipping a file the running broker removed between the listing and the copy (its
    checkpoints are written as ``<name>.tmp`` and renamed, the replication-offset one every 5 s)."""
    try:
        shutil.copy2(src, dst)
    except FileNotFoundError:
        if Path(src).exists():
            raise


def _copy_log_dir(src: Path, dst: Path) -> None:
    """The log dir as ``cp -a`` would copy it, also while the broker runs and appends."""
    shutil.copytree(src, dst, symlinks=True, copy_function=_copy_if_present)


def _end_offsets(admin, topic: str, partition: int) -> tuple[int, int]:
    """(high watermark, last stable offset): ListOffsets latest, read_uncommitted and read_committed."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    out = []
    for iso in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        res = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.latest()}, isolation_level=iso,
                                 request_timeout=10)
        out.append(next(iter(res.values())).result().offset)
    return out[0], out[1]


def _late_writes(report: dict, topic: str, partition: int) -> list[dict]:
    return [f for f in report["findings"] if f["rule"] == "hanging-transaction" and f.get("kind") == "late-write"
            and f["topic"] == topic and f["partition"] == partition]


@pytest.fixture(scope="module")
def loop(tmp_path_factory):
    from confluent_kafka.admin import AdminClient

    t0 = time.monotonic()
    work = tmp_path_factory.mktemp("verify-fix")
    # the capture context puts its broker under build/capture/<name>/; this one lives in the test's tmp dir
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(capture_context, "WORK", work / "brokers")
        ctx = capture_context.Ctx("verify-fix", SCENARIO.version, SCENARIO.overrides, SCENARIO.features)
    broker = ctx.broker
    facts: dict = {"work": work, "bootstrap": broker.bootstrap, "version": SCENARIO.version}
    try:
        # 1. the anomaly, made by the shipped capture's own scenario code on this live broker
        ctx.start()
        late = SCENARIO.run(ctx)["expect"]["anomalies"][0]
        facts["late"] = late
        facts["end_offsets_before"] = ctx.rec.end_offsets[f"{late['topic']}-{late['partition']}"]
        ctx.close_clients()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "logger": ctx.client_log})
        topic, partition = late["topic"], late["partition"]
        facts["t_broker_s"] = time.monotonic() - t0

        # 2. copy the running broker's log dir and scan the copy
        copy1 = work / "copy-before"
        _copy_log_dir(broker.log_dir, copy1)
        proc, before = _scan(copy1, work / "tables-before", "--bootstrap-server", broker.bootstrap)
        (work / "before.json").write_text(proc.stdout)
        facts.update(before=before, before_rc=proc.returncode, t_scan1_s=time.monotonic() - t0)
        found = _late_writes(before, topic, partition)
        assert found, f"no late-write finding on {topic}-{partition}: {json.dumps(before['findings'], indent=1)[:4000]}"
        command = found[0]["remediation_commands"][0]["command"]
        facts["command"] = command

        # 3. run the advised command with Kafka's own tool
        argv = shlex.split(command)
        assert argv and argv[0] == "kafka-transactions.sh", command
        tool = _run(java_command(SCENARIO.version, TRANSACTIONS_COMMAND, *argv[1:], log_level="warn"), timeout=120)
        facts["tool"] = {"argv": argv, "returncode": tool.returncode, "stdout": tool.stdout, "stderr": tool.stderr}
        assert tool.returncode == 0, f"{command} exited {tool.returncode}:\n{tool.stdout}\n{tool.stderr[-3000:]}"

        # 4. the broker's LSO catches up with its high watermark
        deadline = time.monotonic() + 30
        while True:
            hw, lso = _end_offsets(admin, topic, partition)
            if lso == hw or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        facts["end_offsets_after"] = {"high_watermark": hw, "last_stable_offset": lso}
        del admin

        # 5. stop cleanly, copy again, scan against the baseline; dump the partition
        broker.stop()
        copy2 = work / "copy-after"
        _copy_log_dir(broker.log_dir, copy2)
        proc, after = _scan(copy2, work / "tables-after", "--baseline", work / "before.json")
        (work / "after.json").write_text(proc.stdout)
        facts.update(after=after, after_rc=proc.returncode)
        dump = _run([TXN_AUDIT, "dump", copy2 / f"{topic}-{partition}", "--format", "jsonl"], timeout=120)
        assert dump.returncode == 0, dump.stderr[-3000:]
        facts["dump"] = [json.loads(line) for line in dump.stdout.splitlines() if line.strip()]
        facts["total_s"] = time.monotonic() - t0
        print(f"\nverify-fix: broker start {broker.timings.get('start_s', 0):.1f}s, scenario done at "
              f"{facts['t_broker_s']:.1f}s, first scan done at {facts['t_scan1_s']:.1f}s, total {facts['total_s']:.1f}s")
        yield facts
    except BaseException:
        print(f"broker output tail:\n{broker.log_tail(40)}")
        raise
    finally:
        broker.kill()


def test_the_broker_holds_a_late_write(loop):
    """The scenario's late batch pins the broker's LSO (its own view, before the auditor looks)."""
    late, eo = loop["late"], loop["end_offsets_before"]
    assert late["first_offset"] > late["after_marker_offset"]  # appended after the ABORT marker
    assert eo["last_stable_offset"] == late["first_offset"] < eo["high_watermark"]


def test_scan_of_the_running_broker_advises_the_abort(loop):
    late, before = loop["late"], loop["before"]
    assert loop["before_rc"] == 1  # a critical finding: --fail-on error
    found = _late_writes(before, late["topic"], late["partition"])
    assert len(found) == 1, found
    f = found[0]
    assert f["severity"] == "critical"
    assert (f["producer_id"], f["producer_epoch"], f["first_offset"]) == \
        (late["producer_id"], late["producer_epoch"], late["first_offset"])
    assert f["remediation_commands"][0]["command"] == (
        f"kafka-transactions.sh --bootstrap-server {loop['bootstrap']} abort --topic {late['topic']} "
        f"--partition {late['partition']} --start-offset {late['first_offset']}")
    assert (loop["work"] / "before.json").is_file()


def test_kafkas_tool_runs_the_command(loop):
    assert loop["tool"]["returncode"] == 0, loop["tool"]


def test_lso_catches_up_with_the_high_watermark(loop):
    eo = loop["end_offsets_after"]
    assert eo["last_stable_offset"] == eo["high_watermark"], eo
    # one record more than before the fix: the ABORT marker
    assert eo["high_watermark"] == loop["end_offsets_before"]["high_watermark"] + 1


def test_rescan_against_the_baseline_says_resolved(loop):
    late, after = loop["late"], loop["after"]
    topic, partition = late["topic"], late["partition"]
    assert loop["after_rc"] == 0, json.dumps(after["findings"], indent=1)[:4000]
    assert after["summary"]["baseline"]["resolved"] >= 1, after["summary"]
    resolved = [f for f in after["resolved"] if f["rule"] == "hanging-transaction" and f.get("kind") == "late-write"
                and (f["topic"], f["partition"], f["first_offset"]) == (topic, partition, late["first_offset"])]
    assert len(resolved) == 1, after["resolved"]
    assert not _late_writes(after, topic, partition)
    left = [f for f in after["findings"] if f["topic"] == topic and f["partition"] == partition
            and f["severity"] in SEVERE]
    assert left == [], left
    new = [f for f in after["findings"] if f.get("baseline") == "new" and f["severity"] in SEVERE]
    assert new == [], new


def test_the_abort_marker_is_in_the_copy(loop):
    late = loop["late"]
    aborts = [b for b in loop["dump"] if b.get("type") == "batch" and b.get("is_control")
              and b.get("control_type") == "ABORT" and b["base_offset"] >= late["first_offset"]]
    assert len(aborts) == 1, aborts
    marker = aborts[0]
    assert (marker["producer_id"], marker["producer_epoch"]) == (late["producer_id"], late["producer_epoch"])
    assert marker["base_offset"] == loop["end_offsets_before"]["high_watermark"]  # right after the late batch
