"""The example alert rules (docs/prometheus/) and the metrics file, through the real tools.

* ``promtool check rules`` and ``promtool test rules`` (the unit tests beside the rules);
  the alert table of docs/operations.md is the rules file's;
* a real pipeline: ``txn-audit batch --metrics`` over a capture with a hanging transaction
  writes the file into a real node_exporter's textfile directory, a real Prometheus scrapes it
  and evaluates a copy of the rules with short ``for:`` durations; its alerts go pending, then
  fire; a failed run keeps them firing (and fires ``TxnAuditFailing``); a run after the
  transaction was aborted (the capture as the operator's ``kafka-transactions.sh abort`` and a
  clean stop leave it: :func:`abort_the_late_write`) resolves them, and its open-findings series
  go to 0. Every wait polls the HTTP API for the
  condition, with a deadline.
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path

import crc32c
import pytest
import yaml
from click.testing import CliRunner

from builders import marker
from conftest import PROJECT, SAMPLE_LOGS
from prometheus_support import Prometheus, binary, doc_table, node_exporter, prometheus, wait_for
from auditor.cli.main import cli
from auditor.report.metrics import METRICS

RULES = PROJECT / "docs" / "prometheus" / "txn-audit.rules.yml"
HANGING, STUCK, FAILING, NOT_RUN = "TxnAuditHangingTransaction", "TxnAuditLsoStuck", "TxnAuditFailing", "TxnAuditNotRun"
FOR = "2s"  # the test copy's `for:` (the rules say minutes); scrapes and evaluations every second
# the capture's hanging transaction is 392 ms old against its cluster's newest batch (an offline
# dump has no "now"): the run's --max-timeout-ms puts it past the timeout, as an hour does on a live cluster
MAX_TIMEOUT_MS = 100
# the rules the alerts read (the audit of every rule in batch runs is test_batch_job's and test_batch_cluster's)
AUDITED = ("hanging-transaction", "stuck-lso")


def abort_the_late_write(broker: Path) -> None:
    """hanging-late-write's log dir as the fix leaves it: ``kafka-transactions.sh abort`` has the
    leader of transfers-0 write an ABORT marker for producer 0, epoch 0 after the late write
    (offset 17) and index the aborted transaction (first offset 15, LSO 18 after it); the clean stop
    that follows writes a producer snapshot at the log end (the transaction no longer open) and the
    checkpoints at 18. (A scan of the result with every rule reported nothing when this was written;
    the test checks that the two rules it runs open nothing.)"""
    part = broker / "transfers-0"
    with open(part / "00000000000000000014.log", "ab") as f:
        f.write(marker(17, 0, 0, commit=False, coordinator_epoch=0, timestamp=1795324884346))
    with open(part / "00000000000000000014.txnindex", "ab") as f:
        f.write(struct.pack(">hqqqq", 0, 0, 15, 17, 18))  # version, producer id, first, last offset, LSO
    snapshot = bytearray((part / "00000000000000000017.snapshot").read_bytes())  # its one entry: producer 0
    snapshot[-8:] = struct.pack(">q", -1)  # currentTxnFirstOffset: none open
    snapshot[2:6] = struct.pack(">I", crc32c.crc32c(bytes(snapshot[6:])))
    (part / "00000000000000000018.snapshot").write_bytes(bytes(snapshot))
    for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint"):
        text = (broker / name).read_text()
        assert "transfers 0 17\n" in text
        (broker / name).write_text(text.replace("transfers 0 17\n", "transfers 0 18\n"))


def rules() -> list[dict]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_the_rules_pass_promtool_check_and_their_unit_tests():
    tool = binary("promtool")
    check = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0 and f"SUCCESS: {len(rules())} rules found" in check.stdout, check.stdout + check.stderr
    unit = subprocess.run([tool, "test", "rules", "txn-audit.rules.test.yml"], cwd=RULES.parent, capture_output=True,
                          text=True)
    assert unit.returncode == 0 and "SUCCESS" in unit.stdout, unit.stdout + unit.stderr


def test_the_doc_alert_table_is_the_rules_file():
    documented = {r[0].strip("`"): (r[1].split("`")[1], r[2]) for r in doc_table("| alert | expression | for |")}
    assert documented == {r["alert"]: (" ".join(r["expr"].split()), r.get("for", "")) for r in rules()}
    named = {m.name for m in METRICS}
    used = {w for r in rules() for w in r["expr"].replace("(", " ").split() if w.startswith("txn_audit_")}
    assert used <= named, used - named


def _test_rules(path: Path) -> Path:
    """The rules with every ``for:`` at :data:`FOR`."""
    doc = yaml.safe_load(RULES.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = FOR
    path.write_text(yaml.safe_dump(doc))
    return path


def _batch(logs: Path, wh: Path, prom_file: Path) -> tuple[int, str]:
    """One ``txn-audit batch`` command line, in this process (the shared Spark session): its exit
    status and stdout (the run's one-line JSON summary)."""
    rules = [a for r in AUDITED for a in ("--rule", r)]
    res = CliRunner().invoke(cli, ["batch", "--input", str(logs), "--warehouse", str(wh), "--quiet", *rules,
                                   "--max-timeout-ms", str(MAX_TIMEOUT_MS), "--metrics", str(prom_file)])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.output
    return res.exit_code, res.stdout


def _fires(prom: Prometheus, name: str) -> tuple[dict, dict] | None:
    """(the firing alert, its ALERTS samples) once ``name`` fires."""
    active = prom.alerts(name)
    return (active[0], prom.alert_samples(name)) if active and active[0]["state"] == "firing" else None


def _check_series(prom: Prometheus) -> None:
    """What Prometheus stored: every txn_audit_ series with its registry labels (plus job and
    instance), and node_exporter read the file without an error."""
    labels = {m.name: set(m.labels) | {"job", "instance"} for m in METRICS}
    series = prom.api("series", **{"match[]": '{__name__=~"txn_audit_.+"}'})
    assert series and all(set(s) - {"__name__"} == labels[s["__name__"]] for s in series), series
    assert [float(r["value"][1]) for r in prom.query("node_textfile_scrape_error")] == [0.0]


@pytest.mark.spark
def test_an_alert_fires_on_a_hanging_transaction_and_resolves_after_the_fix(spark, tmp_path, record_property):
    logs, wh, textfile = tmp_path / "logs", tmp_path / "wh", tmp_path / "textfile"
    shutil.copytree(SAMPLE_LOGS / "hanging-late-write" / "broker-1", logs / "broker-1")
    textfile.mkdir()
    meta = (logs / "broker-1" / "meta.properties").read_text()
    cluster = re.search(r"^cluster\.id=(.+)$", meta, re.M).group(1)
    prom_file = textfile / "txn_audit.prom"
    life: dict = {"runs": []}

    def run(inputs: Path) -> int:
        t0 = time.monotonic()
        code, out = _batch(inputs, wh, prom_file)
        life["runs"].append((round(time.monotonic() - t0, 1), json.loads(out)["stage_seconds"] if code == 0 else None))
        return code

    with node_exporter(textfile, tmp_path) as target, \
            prometheus(target, _test_rules(tmp_path / "rules.yml"), tmp_path) as prom:
        assert run(logs) == 0
        firing, samples = wait_for(lambda: _fires(prom, HANGING), f"{HANGING} to fire")
        labels = {k: firing["labels"][k] for k in ("cluster", "topic", "partition")}
        assert labels == {"cluster": cluster, "topic": "transfers", "partition": "0"}
        assert float(firing["value"]) == pytest.approx(0.392)  # the finding's duration_ms, in seconds
        pending, fired = samples["pending"][0], samples["firing"][0]
        assert pending < fired and fired - pending >= 1.5, samples  # pending for `for:` (2 s), then firing
        wait_for(lambda: _fires(prom, STUCK), f"{STUCK} to fire")
        # how long the stuck LSO has been pinned: its stuck-lso finding's duration_ms, the hanging
        # transaction's age (not the span of data behind the LSO)
        pinned = prom.query("txn_audit_lso_lag_seconds")
        assert [(r["metric"]["topic"], float(r["value"][1])) for r in pinned] == [("transfers", pytest.approx(0.392))]
        assert prom.state(FAILING) is None and prom.state(NOT_RUN) is None
        _check_series(prom)
        life.update(pending=pending, firing=fired)

        assert run(tmp_path / "unmounted") == 2  # a failed run: the values stay
        wait_for(lambda: _fires(prom, FAILING), f"{FAILING} to fire")
        still = prom.alerts(HANGING)
        assert [a["state"] for a in still] == ["firing"] and still[0]["activeAt"] == firing["activeAt"], still

        abort_the_late_write(logs / "broker-1")
        assert run(logs) == 0
        wait_for(lambda: prom.state(HANGING) is None and prom.state(FAILING) is None, f"{HANGING} to resolve")
        life["resolved"] = time.time()
        life["last_firing"] = prom.alert_samples(HANGING)["firing"][-1]
        assert prom.state(STUCK) is None and not prom.query("txn_audit_hanging_transaction_age_seconds")
        late = prom.query('txn_audit_open_findings{rule="hanging-transaction",kind="late-write"}')
        assert [(r["metric"]["cluster"], r["value"][1]) for r in late] == [(cluster, "0")]
        assert float(prom.query("sum(txn_audit_open_findings)")[0]["value"][1]) == 0
    record_property("alert_life", life)
    print(f"\n{HANGING}: pending {life['pending']:.3f}, firing {life['firing']:.3f}, last firing sample "
          f"{life['last_firing']:.3f}, seen resolved {life['resolved']:.3f}; batch runs (s, stages) {life['runs']}")
