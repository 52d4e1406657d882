"""The Prometheus metrics file of ``scan --metrics`` / ``batch --metrics`` (auditor/report/metrics.py).

* its names and labels are the registry, and the registry is the table of docs/operations.md
  ("Metrics and alerts (Prometheus)"): a name or a label cannot change without the doc;
* what it counts: open findings by cluster, rule, kind and severity (0 for every kind of the
  catalog), per-partition ages and lags of the findings that need action, capped with a roll-up;
* a failed run keeps the last good values; the file is replaced atomically and readable by the
  collector's user; a path that cannot be written fails before the audit;
* a real ``scan`` writes the figures of its own findings, and Prometheus's ``promtool check
  metrics`` finds nothing to say about the file.

tests/test_prometheus.py takes the file through a real node_exporter and Prometheus.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from pathlib import Path

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner

from conftest import SAMPLE_LOGS
from prometheus_support import binary, doc_table
from auditor.cli.main import cli
from auditor.engine.rule import catalog
from auditor.report import metrics as M

LINE = re.compile(r'^([a-z_:][a-z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[tuple, float]:
    """``{(name, ((label, value), ...)): value}`` of every series line (an independent reading)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        m = LINE.match(line)
        assert m, f"not a series line: {line!r}"
        labels = tuple(LABEL.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(series: dict, name: str, **labels) -> float | None:
    want = set(labels.items())
    hits = [v for (n, ls), v in series.items() if n == name and want <= set(ls)]
    assert len(hits) <= 1, hits
    return hits[0] if hits else None


def finding(rule: str, kind: str, cluster: str = "c1", topic: str = "orders", partition: int = 0,
            duration_ms: int | None = None, **evidence) -> dict:
    """A finding in the engine's shape, with the severity the catalog gives its kind."""
    return {"rule": rule, "kind": kind, "severity": catalog()[rule].kinds[kind].severity, "cluster_id": cluster,
            "topic": topic, "partition": partition, "duration_ms": duration_ms, "evidence": evidence}


def outcome(findings: list[dict], clusters=("c1",)) -> M.Outcome:
    return M.Outcome(findings, list(clusters), list(catalog().values()), files_decoded=7, max_timeout_ms=900_000)


def lint(text: str) -> str:
    """What ``promtool check metrics`` (Prometheus's own linter) says about an exposition."""
    proc = subprocess.run([binary("promtool"), "check", "metrics"], input=text, capture_output=True, text=True)
    return f"status {proc.returncode}: {proc.stdout}{proc.stderr}" if proc.returncode or proc.stdout else ""


# -- names and labels ------------------------------------------------------------------------------


def test_the_doc_table_is_the_registry():
    rows = doc_table("| metric | labels | a failed run |")
    documented = {r[0].strip("`"): (tuple(x.strip(" `") for x in r[1].split(",") if x.strip()), r[2]) for r in rows}
    registry = {m.name: (m.labels, "kept" if m.kept else "its own") for m in M.METRICS}
    assert documented == registry


def test_the_file_holds_the_registry_and_nothing_else():
    findings = [finding("hanging-transaction", "late-write", duration_ms=1_200_000),
                finding("stuck-lso", "stuck", duration_ms=1_200_000, lag_offsets=42, lag_ms=1_199_000)]
    text = M.success_text(outcome(findings), ended_s=1_800_000_000.5, duration_s=12.25)
    emitted = {}
    for name, labels in parse(text):
        emitted.setdefault(name, set()).add(tuple(k for k, _ in labels))
    assert emitted == {m.name: {m.labels} for m in M.METRICS}
    assert lint(text) == ""


def test_a_label_outside_the_registry_is_refused():
    with pytest.raises(ValueError, match="registry"):
        M.sample(M.HANGING_AGE, 1.0, cluster="c1", topic="t", partition=0, broker="1")


# -- what it counts --------------------------------------------------------------------------------


def test_open_findings_by_kind_with_a_zero_for_every_kind_of_the_catalog():
    findings = [finding("hanging-transaction", "in-flight", partition=p) for p in range(3)]
    findings += [finding("out-of-order-sequence", "gap", cluster="c2")]
    s = parse(M.success_text(outcome(findings, clusters=("c1", "c2", "c3")), 1.0, 1.0))
    assert value(s, "txn_audit_open_findings", cluster="c1", rule="hanging-transaction", kind="in-flight",
                 severity="info") == 3
    assert value(s, "txn_audit_open_findings", cluster="c2", rule="out-of-order-sequence", kind="gap") == 1
    kinds = sum(len(r.kinds) for r in catalog().values())
    for c in ("c1", "c2", "c3"):
        mine = {ls: v for (n, ls), v in s.items() if n == "txn_audit_open_findings" and ("cluster", c) in ls}
        assert len(mine) == kinds, c
    assert sum(v for (n, _), v in s.items() if n == "txn_audit_open_findings") == 4


def test_partition_series_come_from_findings_that_need_action_their_largest_value():
    findings = [
        finding("hanging-transaction", "late-write", duration_ms=5_000),
        finding("hanging-transaction", "hanging", duration_ms=2_000_000),  # same partition, older
        finding("hanging-transaction", "in-flight", partition=1, duration_ms=9_000_000),  # info: normal state
        finding("hanging-transaction", "undetermined", partition=2, duration_ms=9_000_000),  # warning: unsettled
        finding("stuck-lso", "stuck", duration_ms=2_000_000, lag_offsets=10, lag_ms=1_500),
        finding("stuck-lso", "open", partition=1, duration_ms=9_000_000, lag_offsets=99, lag_ms=99_000),  # info
    ]
    s = parse(M.success_text(outcome(findings), 1.0, 1.0))
    ages = {dict(ls)["partition"]: v for (n, ls), v in s.items() if n == "txn_audit_hanging_transaction_age_seconds"}
    assert ages == {"0": 2000.0}
    assert value(s, "txn_audit_lso_lag_offsets", partition="0") == 10
    assert value(s, "txn_audit_lso_lag_seconds", partition="0") == 2000
    assert value(s, "txn_audit_lso_lag_offsets", partition="1") is None


def test_a_pinned_lso_shows_its_age_not_the_span_of_data_behind_it():
    """Issue 55: an LSO pinned for 1m46s by a transaction whose batches are the partition's newest
    (written in one millisecond: ``lag_ms`` 0). The file says how long it has been pinned, the
    finding's ``duration_ms`` (the verdict's age as of the reference instant); no series says 0."""
    pin = finding("stuck-lso", "stuck", duration_ms=106_000, lag_offsets=3, lag_ms=0)
    s = parse(M.success_text(outcome([pin]), 1.0, 1.0))
    assert value(s, "txn_audit_lso_lag_seconds", partition="0") == 106
    mine = {n: v for (n, ls), v in s.items() if ("partition", "0") in ls}
    assert mine == {"txn_audit_lso_lag_offsets": 3, "txn_audit_lso_lag_seconds": 106}


def test_partitions_past_the_cap_are_one_roll_up_series_per_cluster():
    findings = [finding("hanging-transaction", "late-write", partition=p, duration_ms=1000 * (p + 1)) for p in range(5)]
    findings += [finding("hanging-transaction", "late-write", cluster="c2", partition=p, duration_ms=100 * (p + 1))
                 for p in range(2)]
    s = parse(M.success_text(outcome(findings, clusters=("c1", "c2")), 1.0, 1.0, limit=3))
    ages = {(dict(ls)["cluster"], dict(ls)["topic"], dict(ls)["partition"]): v for (n, ls), v in s.items()
            if n == "txn_audit_hanging_transaction_age_seconds"}
    assert ages == {("c1", "orders", "4"): 5.0, ("c1", "orders", "3"): 4.0, ("c1", "orders", "2"): 3.0,
                    ("c1", "other", "other"): 2.0, ("c2", "other", "other"): 0.2}


# -- the file --------------------------------------------------------------------------------------


def test_a_failed_run_keeps_the_last_good_values(tmp_path):
    path = str(tmp_path / "txn_audit.prom")
    with M.recording(path):  # a failure with no previous file: only the run's own series
        pass
    first = parse(Path(path).read_text())
    assert {n for n, _ in first} == {"txn_audit_run_success", "txn_audit_run_timestamp_seconds",
                                     "txn_audit_run_duration_seconds"}
    assert value(first, "txn_audit_run_success") == 0
    findings = [finding("hanging-transaction", "late-write", duration_ms=1_200_000),
                finding("stuck-lso", "stuck", duration_ms=1_200_000, lag_offsets=42, lag_ms=1_199_000)]
    with M.recording(path) as run:
        run.succeeded(outcome(findings))
    good = parse(Path(path).read_text())
    for _ in range(2):  # a failure after a failure still keeps them
        with pytest.raises(RuntimeError), M.recording(path):
            raise RuntimeError("the audit broke")
    failed = parse(Path(path).read_text())
    own = {m.name for m in M.METRICS if not m.kept}
    assert {k: v for k, v in failed.items() if k[0] not in own} == {k: v for k, v in good.items() if k[0] not in own}
    assert value(failed, "txn_audit_hanging_transaction_age_seconds", partition="0") == 1200
    assert value(failed, "txn_audit_run_success") == 0 and value(good, "txn_audit_run_success") == 1
    assert value(failed, "txn_audit_run_timestamp_seconds") > value(good, "txn_audit_last_success_timestamp_seconds")
    assert lint(Path(path).read_text()) == ""


def test_the_file_is_replaced_whole_and_readable_by_the_collector(tmp_path):
    """A reader polling the file while it is rewritten sees one whole version or the other, never
    a truncated or empty one (what an in-place write shows); nothing else is left in the directory."""
    path = tmp_path / "txn_audit.prom"
    texts = [("# a\n" + "x 1\n" * 200_000), ("# b\n" + "y 2\n" * 150_000)]
    M.write_atomically(str(path), texts[0])
    seen, done = [], threading.Event()

    def read() -> None:
        while not done.is_set():
            seen.append(path.read_text())

    reader = threading.Thread(target=read)
    reader.start()
    try:
        for i in range(40):
            M.write_atomically(str(path), texts[i % 2])
    finally:
        done.set()
        reader.join()
    assert len(seen) > 10 and all(s in texts for s in seen), {len(s) for s in seen if s not in texts}
    assert os.listdir(tmp_path) == ["txn_audit.prom"]
    assert path.stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("command", ["scan", "batch"])
def test_a_metrics_path_that_cannot_be_written_fails_before_the_run(tmp_path, command):
    args = {"scan": ["scan", str(SAMPLE_LOGS / "clean")],
            "batch": ["batch", "--input", str(SAMPLE_LOGS / "clean"), "--warehouse", str(tmp_path / "wh")]}[command]
    res = CliRunner().invoke(cli, [*args, "--metrics", str(tmp_path / "no-such-dir" / "txn_audit.prom")])
    assert res.exit_code == 2 and "cannot write" in res.output and "no-such-dir" in res.output, res.output
    assert not (tmp_path / "wh").exists()


# -- a real scan -----------------------------------------------------------------------------------


@pytest.mark.spark
def test_scan_writes_the_figures_of_its_findings_and_a_failed_scan_keeps_them(spark, tmp_path):
    prom, tables = tmp_path / "txn_audit.prom", tmp_path / "tables"
    res = CliRunner().invoke(cli, ["scan", str(SAMPLE_LOGS / "hanging-late-write"), "--tables", str(tables),
                                   "--format", "json", "--quiet", "--severity", "critical", "--metrics", str(prom)])
    assert res.exit_code == 1, res.output  # findings at --fail-on error: a successful run all the same
    shown = json.loads(res.stdout)["findings"]
    s = parse(prom.read_text())
    assert value(s, "txn_audit_run_success") == 1 and value(s, "txn_audit_transaction_max_timeout_seconds") == 900
    hang = next(f for f in shown if f["rule"] == "hanging-transaction")
    at = {"cluster": hang["cluster_id"], "topic": hang["topic"], "partition": str(hang["partition"])}
    assert value(s, "txn_audit_hanging_transaction_age_seconds", **at) == hang["duration_ms"] / 1000
    assert value(s, "txn_audit_open_findings", cluster=hang["cluster_id"], rule="hanging-transaction",
                 kind=hang["kind"], severity=hang["severity"]) == 1
    # --severity critical hides the stuck-lso finding (error) from the report, not from the file
    assert not [f for f in shown if f["rule"] == "stuck-lso"]
    assert value(s, "txn_audit_open_findings", cluster=hang["cluster_id"], rule="stuck-lso", kind="stuck") == 1
    assert value(s, "txn_audit_lso_lag_offsets", **at) == 2  # expected.json: HW 17, LSO 15
    files = ds.dataset(tables / "files").to_table(columns=["status"]).column("status").to_pylist()
    assert value(s, "txn_audit_files_decoded") == sum(st not in ("unreadable", "skipped", "foreign") for st in files)
    assert lint(prom.read_text()) == ""

    gone = CliRunner().invoke(cli, ["scan", str(tmp_path / "unmounted"), "--metrics", str(prom)])
    assert gone.exit_code == 2, gone.output
    after = parse(prom.read_text())
    assert value(after, "txn_audit_run_success") == 0
    assert value(after, "txn_audit_hanging_transaction_age_seconds", **at) == hang["duration_ms"] / 1000
    assert value(after, "txn_audit_last_success_timestamp_seconds") == value(s, "txn_audit_last_success_timestamp_seconds")


@pytest.mark.spark
def test_a_batch_refused_for_a_busy_warehouse_leaves_the_file_to_the_run_holding_it(spark, tmp_path):
    from auditor.batch.lock import warehouse_lock

    prom, wh = tmp_path / "txn_audit.prom", tmp_path / "wh"
    M.write_atomically(str(prom), "# the holder's last file\ntxn_audit_run_success 1\n")
    with warehouse_lock(str(wh)):
        res = CliRunner().invoke(cli, ["batch", "--input", str(SAMPLE_LOGS / "clean"), "--warehouse", str(wh),
                                       "--metrics", str(prom)])
    assert res.exit_code == 3, res.output
    assert prom.read_text() == "# the holder's last file\ntxn_audit_run_success 1\n"
