"""Hostile and broken inputs: no hang, no unbounded memory, no escape injection.

Every case writes real files into a tmp dir and runs the real code path: discovery,
the ``dump`` CLI (in a subprocess with a timeout where a hang is the failure), and
ingestion's per-task decode (``decode_task`` / ``iter_rows``, what Spark executors run).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from builders import sparse_segment
from conftest import PROJECT, SAMPLE_LOGS
from auditor.ingest.inventory import build_inventory
from auditor.ingest.plan import make_plan

CLEAN = SAMPLE_LOGS / "clean" / "broker-1"


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "auditor.cli.main", *args], capture_output=True, timeout=timeout,
                          cwd=PROJECT, env={**os.environ, "COLUMNS": "200"})


# -- 1. symlink loops ------------------------------------------------------------------------------

@pytest.fixture()
def loop_dir(tmp_path: Path) -> Path:
    """A copy of a clean log dir with ``loop -> .`` in it and ``loop -> ..`` inside a partition dir,
    in a parent that also links back to itself (what hung ``dump`` in the issue)."""
    parent = tmp_path / "dump"
    shutil.copytree(CLEAN, parent / "broker-1")
    (parent / "loop").symlink_to(".")
    (parent / "broker-1" / "loop").symlink_to(".")
    (parent / "broker-1" / "orders-0" / "loop").symlink_to("..")
    (parent / "broker-1" / "up").symlink_to("..")
    return parent


def _good_files(root: Path) -> set[str]:
    return {p.name + "@" + p.parent.name for p in root.rglob("*") if p.is_file() and not p.is_symlink()}


def test_discovery_does_not_follow_symlink_loops(loop_dir: Path):
    t0 = time.monotonic()
    plan = make_plan([str(loop_dir)])
    assert time.monotonic() - t0 < 10
    loops = [f for f in plan.files if f.kind == "symlink-loop"]
    assert sorted(Path(f.path).relative_to(loop_dir).as_posix() for f in loops) == [
        "broker-1/loop", "broker-1/orders-0/loop", "broker-1/up", "loop"]
    assert all("already walked" in f.note and "not followed" in f.note for f in loops)
    # every real file is found exactly once, under its own (non-looping) path, with its partition
    real = [f for f in plan.files if f.kind != "symlink-loop"]
    assert len({f.path for f in real}) == len(real)
    assert all("/loop/" not in f.path and "/up/" not in f.path for f in real)
    assert {Path(f.path).name + "@" + Path(f.path).parent.name for f in real} == _good_files(CLEAN)
    orders = [f for f in real if f.topic == "orders" and f.partition == 0]
    assert orders and all(f.broker_id is not None for f in orders)
    # the inventory reports each loop once, as skipped (clean), with the note
    rows = {r["path"]: r for r in build_inventory(plan.files, {}, {})}
    for f in loops:
        assert rows[f.path]["status"] == "skipped" and "not followed" in rows[f.path]["note"]


def test_discovery_of_a_partition_dir_holding_a_loop(loop_dir: Path):
    part = loop_dir / "broker-1" / "orders-0"
    files = make_plan([str(part)]).files
    assert {f.topic for f in files if f.kind == "segment"} == {"orders"}
    # the loop leads to the log dir, which was not walked before: followed once, never twice
    assert len({f.path for f in files}) == len(files)


def test_dump_cli_on_a_symlink_loop_finishes_and_decodes(loop_dir: Path):
    t0 = time.monotonic()
    res = _cli("dump", str(loop_dir), timeout=60)
    took = time.monotonic() - t0
    assert took < 30, took
    objs = [json.loads(line) for line in res.stdout.decode().splitlines()]
    clean = _cli("dump", str(CLEAN), timeout=60)
    assert clean.returncode == 0
    # the good files are all decoded, once each
    assert len(objs) == len(clean.stdout.decode().splitlines()) > 100
    err = res.stderr.decode()
    assert err.count("not followed") == 4 and f"{loop_dir}/loop:" in err


# -- 2. bounded reads ------------------------------------------------------------------------------

_V2 = struct.Struct(">qiibIhiqqqhii")




_PROBE = textwrap.dedent("""
    import json, resource, sys
    mode, path, active = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    from auditor.cli.main import cli
    from auditor.ingest.plan import make_plan
    from auditor.ingest.tables import TABLES, iter_rows
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    problems = []
    if mode == "dump":
        try:
            cli.main(["dump", "--records", path], standalone_mode=False)
        except SystemExit:
            pass
    else:
        for t in make_plan([path], split_bytes=1 << 62).tasks:
            t["active"] = active
            for name, spec in TABLES.items():
                if spec.accepts(t):
                    problems += [[name, r["_problem_kind"], r["_problem_position"]]
                                 for r in iter_rows(spec, t) if r.get("_problem_kind")]
    growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    sys.stderr.write("\\nRESULT " + json.dumps({"growth_mib": growth, "problems": problems}) + "\\n")
""")


def _probe(mode: str, path: Path, active: bool = True) -> tuple[dict, str]:
    res = subprocess.run([sys.executable, "-c", _PROBE, mode, str(path), "1" if active else "0"],
                         capture_output=True, timeout=120, cwd=PROJECT)
    err = res.stderr.decode()
    line = [x for x in err.splitlines() if x.startswith("RESULT ")]
    assert line, err[-2000:]
    return json.loads(line[-1][7:]), err


@pytest.fixture(scope="module")
def sparse(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("sparse")
    out = {
        # the claimed entry (2^31 + 11 bytes) fits in the file exactly: framing accepts it
        "control": d / "events-0" / "00000000000000000000.log",
        "txn": d / "__transaction_state-0" / "00000000000000000000.log",
        # the file: 2 GiB, one byte short of the claimed entry
        "short": d / "short-0" / "00000000000000000000.log",
    }
    sparse_segment(out["control"], 0x30, 2**31 + 11)  # transactional control batch
    sparse_segment(out["txn"], 0x00, 2**31 + 11)  # a data batch of __transaction_state
    sparse_segment(out["short"], 0x30, 2**31)
    return out


@pytest.mark.parametrize("case", ["control", "txn", "short"])
def test_dump_of_a_2gib_sparse_batch_stays_small(sparse, case):
    result, err = _probe("dump", sparse[case])
    assert result["growth_mib"] < 200, result
    path = str(sparse[case])
    assert f"bad-length {path} at byte 8:" in err, err[-2000:]


@pytest.mark.parametrize("case", ["control", "txn", "short"])
def test_ingest_decode_of_a_2gib_sparse_batch_stays_small(sparse, case):
    result, _ = _probe("ingest", sparse[case], active=True)
    assert result["growth_mib"] < 200, result
    assert ["batches" if case != "txn" else "transaction_log", "bad-length", 8] in result["problems"], result


def test_columnar_decode_of_a_2gib_sparse_batch_stays_small(sparse):
    result, _ = _probe("ingest", sparse["control"], active=False)
    assert result["growth_mib"] < 200, result
    assert ["batches", "bad-length", 8] in result["problems"], result


def test_read_payload_refuses_before_reading(tmp_path):
    import io

    from auditor.errors import DecodeError
    from auditor.formats.batch import iter_segment, read_payload
    from conftest import CountingReader

    head = _V2.pack(0, 100 * 1024 * 1024, 0, 2, 0, 0, 0, 0, 0, 7, 0, -1, 1)
    f = CountingReader(head + bytes(100 * 1024 * 1024 + 12 - len(head)))
    h = next(iter_segment(f, file_size=len(f.getvalue()), verify_crc=False))
    f.max_read = 0
    with pytest.raises(DecodeError) as exc:
        read_payload(f, h)
    assert exc.value.kind == "bad-length" and exc.value.position == 8 and f.max_read == 0
    # a payload the file no longer holds (it shrank after the header was read) is truncated, not short
    h.size = 200
    g = io.BytesIO(head + b"\0" * 50)
    with pytest.raises(DecodeError) as exc:
        read_payload(g, h)
    assert exc.value.kind == "truncated" and exc.value.position == 111
    h.size = -5  # an int32-wrapped size must not become f.read(-1) (the whole file)
    with pytest.raises(DecodeError) as exc:
        read_payload(g, h)
    assert exc.value.kind == "bad-length"


# -- 3. report robustness: rows with missing keys --------------------------------------------------

from auditor.report.spark.data import affected_partitions, sort_key  # noqa: E402
from auditor.report import FORMATS, build_report, render  # noqa: E402
from auditor.report.render_table import render_table  # noqa: E402

T0 = 1_714_564_800_000


def _finding(**kw) -> dict:
    f = {"rule": "hanging-transaction", "severity": "error", "cluster_id": "c1", "broker_id": 1, "log_dir": "/d/b1",
         "topic": "orders", "partition": 0, "producer_id": 7, "producer_epoch": 2, "first_offset": 100,
         "first_timestamp": T0, "last_timestamp": T0 + 5000, "message": "hanging transaction on orders-0"}
    f.update(kw)
    return {k: v for k, v in f.items() if v is not ...}  # `...` = the key is absent altogether


def _plot(**kw) -> dict:
    p = {"cluster_id": "c1", "broker_id": 1, "log_dir": "/d/b1", "topic": "orders", "partition": 0, "t0": T0,
         "t1": T0 + 1000, "bucket_ms": 10, "high_watermark": None, "log_end_offset": None, "log_start_offset": None,
         "lso_lag": [{"t": T0 + 1000, "log_end": 5, "lso": 3, "lag": 2, "lag_ms": 100, "pinned_by": 7, "open": 1}],
         "transactions_total": 1,
         "sessions": [{"producer_id": 7, "transactional_id": None, "producer_epoch": 2, "marker_epoch": None,
                       "state": "open", "first_offset": 3, "last_offset": 4, "first_timestamp": T0 + 10,
                       "last_timestamp": T0 + 20, "marker_offset": None, "marker_type": None, "marker_timestamp": None,
                       "coordinator_epoch": None, "data_batches": 2}]}
    p.update(kw)
    return p


def _render_all(report) -> dict[str, str]:
    out = {fmt: render(report, fmt) for fmt in FORMATS if fmt != "table"}
    out["table"] = render_table(report, width=200)
    return out


@pytest.mark.parametrize("missing", [
    {"topic": ..., "partition": ...},
    {"broker_id": ..., "log_dir": ...},
    {"cluster_id": ...},
    {"topic": ..., "partition": ..., "broker_id": ..., "log_dir": ..., "cluster_id": ..., "producer_id": ...,
     "first_offset": ..., "first_timestamp": ..., "last_timestamp": ..., "message": ...},
    {"cluster_id": None, "topic": None, "partition": None, "broker_id": None},
], ids=["no-topic", "no-broker", "no-cluster", "bare", "all-none"])
def test_every_renderer_survives_a_finding_with_missing_keys(missing):
    fs = [_finding(), _finding(cluster_id="c2", broker_id=2, partition=1, **{"first_offset": 7}), _finding(**missing)]
    report = build_report(fs, summary={"partitions": 1, "batches": 3}, plots={"partitions": [_plot()]})
    assert len(report.findings) == 3
    out = _render_all(report)
    assert json.loads(out["json"])["summary"]["findings"] == 3
    assert len(out["jsonl"].splitlines()) == 3
    assert "<svg" in out["html"]  # the chart of the partition that has one is still drawn
    assert "hanging-transaction" in out["table"] and "hanging-transaction" in out["markdown"]
    # partitions for charts: the finding without one is left out, the others are kept
    keys, omitted = affected_partitions(report.findings)
    assert ("c1", "orders", 0) in keys and omitted == 0
    assert all(k[1] is not None and k[2] is not None for k in keys)


def test_affected_partitions_with_none_and_mixed_cluster_ids():
    fs = [_finding(cluster_id=None), _finding(cluster_id="c1", partition=2), _finding(cluster_id=None, partition="3"),
          _finding(partition="x"), _finding(severity=...), _finding(severity="critical", cluster_id=None, partition=5)]
    keys, omitted = affected_partitions(fs)
    assert keys[0] == (None, "orders", 5)  # most severe first
    assert set(keys) == {(None, "orders", 0), ("c1", "orders", 2), (None, "orders", 3), ("c1", "orders", 0),
                         (None, "orders", 5)}
    assert sorted([None, "b", 3, "a", None, 1], key=sort_key) == [1, 3, "a", "b", None, None]


def test_renderers_survive_summary_rows_without_ids():
    summary = {
        "inputs": ["/in"], "clusters": [{"cluster_id": None, "as_of_ms": None, "brokers": []},
                                        {"cluster_id": "c1", "as_of_ms": T0, "brokers": [1]}, {}],
        "brokers": [{"cluster_id": None, "broker_id": None, "log_dir": None, "partitions": 1, "batches": 2},
                    {"log_dir": "/d/b1"}, {}],
        "partitions": 1, "batches": 2, "transactions": {"commit": 1, "unknown": 2},
        "transaction_versions": {"seen": [], "commit_markers": {}, "feature_levels": {"c1": 2, None: 1},
                                 "client_versions": {}},
        "time_range": {"first_ms": T0, "last_ms": None},
    }
    plots = {"partitions": [_plot(cluster_id=None, broker_id=None, log_dir=None),
                            _plot(sessions=[], lso_lag=[], transactions_total=0)]}
    report = build_report([_finding(cluster_id=None, broker_id=None, log_dir=None)], summary=summary, plots=plots)
    out = _render_all(report)
    assert "Clusters" in out["table"] and "Brokers (log dirs)" in out["table"]
    assert json.loads(out["json"])["summary"]["brokers"][0]["broker_id"] is None
    assert "<svg" in out["html"]


def test_report_data_with_rows_without_cluster_broker_or_partition(spark, tmp_path):
    """A segment outside any partition or log dir (no topic, partition, broker, cluster), next to a
    log dir without meta.properties: the summary and charts are computed, not dropped (the issue's
    ``TypeError: '<' not supported between instances of 'NoneType' and 'str'``)."""
    from tables_builder import TableSet
    from auditor.report.spark.data import build_report_data
    from auditor.engine.context import AuditContext

    t = TableSet(tmp_path / "tables")
    t.batch("orders", 0, 0, 3, producer_id=10, producer_epoch=0, base_sequence=0, transactional=True, ts=T0)
    t.batch("orders", 0, 3, 1, ts=T0 + 3_600_000)
    t.txn("t-1", 1, "Ongoing", 10, partitions=[("orders", 0)], start_ms=T0, updated_ms=T0)
    t.batch("loose", 0, 0, 2, producer_id=11, producer_epoch=0, base_sequence=0, transactional=True, ts=T0 + 10)
    t.rows["batches"][-1].update(cluster_id=None, broker_id=None)  # a log dir without meta.properties
    t.batch("x", 0, 0, 1, producer_id=12, producer_epoch=0, base_sequence=0, transactional=True, ts=T0 + 20)
    t.rows["batches"][-1].update(cluster_id=None, broker_id=None, log_dir=None, topic=None, partition=None)
    root = t.write()
    manifest = json.loads((root / "_ingest.json").read_text())
    manifest["brokers"] = {"/data/broker-1": {"cluster_id": "test-cluster", "broker_id": 1},
                           "/data/empty": {"cluster_id": None, "broker_id": None}, "/data/odd": {}}
    (root / "_ingest.json").write_text(json.dumps(manifest))
    findings = [_finding(cluster_id="test-cluster", broker_id=1, log_dir="/data/broker-1"),
                _finding(cluster_id=None, topic=None, partition=None, broker_id=None, log_dir=None),
                _finding(cluster_id=..., topic="loose", broker_id=...), _finding(topic=..., partition=...)]
    ctx = AuditContext(spark, str(root))
    try:
        s, plots = build_report_data(ctx, findings)  # raised TypeError before
    finally:
        ctx.close()
    assert s["batches"] == 4 and len(s["brokers"]) == 5
    assert any(b["log_dir"] is None and b["cluster_id"] is None for b in s["brokers"])
    assert any(c["cluster_id"] == "test-cluster" for c in s["clusters"])
    assert [(p["cluster_id"], p["topic"], p["partition"]) for p in plots["partitions"]] == [
        ("test-cluster", "orders", 0)]  # the partition with findings still gets its charts
    out = _render_all(build_report(findings, summary=s, plots=plots))
    assert "<svg" in out["html"]


# -- 4. terminal escape injection: one sanitising function for human-readable output ----------------

import re  # noqa: E402
import shlex  # noqa: E402

from click.testing import CliRunner  # noqa: E402

from auditor.report.console import safe  # noqa: E402
from auditor.cli.main import cli  # noqa: E402

EVIL_TOPIC = "tr\x1b]0;title\x07an\x1b[2Jsfers"  # retitles the terminal, then clears it
EVIL_ID = "id\x1b[2J\x9b31m\r\x7f"


def test_safe_escapes_control_characters():
    assert safe("a\x1b]0;t\x07b\x1b[2J") == "a\\x1b]0;t\\x07b\\x1b[2J"
    assert safe("\r\n\t\x7f\x9b\x00\u202e", markup=False) == "\\r\\n\\t\\x7f\\x9b\\x00\\u202e"
    assert safe("[red]x[/red]") == "\\[red]x\\[/red]" and safe("[red]x", markup=False) == "[red]x"
    assert safe("plain-topic_1.x ünïcödé") == "plain-topic_1.x ünïcödé"


def test_progress_lines_show_item_names_escaped():
    import io

    from rich.console import Console

    from auditor.cli.progress import StageProgress

    buf = io.StringIO()
    with StageProgress(Console(file=buf, force_terminal=True, width=200), enabled=True) as p:
        step = p.stage("decoding")
        step(f"/logs/{EVIL_TOPIC}-0/00000000000000000000.log", 0, 2)
        step(EVIL_ID, 1, 2)
    text = buf.getvalue()
    assert "\x07" not in text and "\x1b]" not in text and "\x1b[2J" not in text and "\x9b" not in text
    assert "\\x1b]0;title\\x07" in text or "done" in text  # the bar's last frame says "done"


@pytest.fixture(scope="module")
def evil(spark, tmp_path_factory):
    """A log dir whose hanging partition is named with escape sequences, plus a broken segment and an
    odd file name in it (so stderr names the path); scanned once (ingest + one rule + report)."""
    base = tmp_path_factory.mktemp("evil")
    logs = base / "logs"
    shutil.copytree(SAMPLE_LOGS / "hanging-late-write" / "broker-1", logs / "broker-1")
    part = logs / "broker-1" / f"{EVIL_TOPIC}-0"
    (logs / "broker-1" / "transfers-0").rename(part)
    seg = (part / "00000000000000000014.log").read_bytes()
    (part / "00000000000000000099.log").write_bytes(seg[:100])  # truncated: a diagnostic with the path
    (part / "notes\x1b[2J\x07.txt").write_text("not Kafka")
    res = CliRunner().invoke(cli, ["scan", str(logs), "--tables", str(base / "tables"), "--out", str(base / "findings"),
                                   "--format", "table", "--rule", "hanging-transaction"])
    return {"logs": logs, "tables": base / "tables", "findings": base / "findings", "scan": res, "part": part}


def _assert_clean(text: str, what: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text and "\r" not in text, (what, text[-3000:])


def test_no_raw_escapes_through_the_cli(evil):
    runs = {"scan": evil["scan"]}
    logs, tables, findings = str(evil["logs"]), str(evil["tables"]), str(evil["findings"])
    for name, args in {
        "dump": ["dump", logs], "dump-table": ["dump", "--format", "table", logs],
        "tables": ["tables", tables], "report-table": ["report", findings, "--format", "table"],
        "report-markdown": ["report", findings, "--format", "markdown"],
        "coordinator": ["coordinator", tables, EVIL_ID],
        "timeline": ["timeline", tables, "--topic", EVIL_TOPIC, "--partition", "0"],
        "ingest": ["ingest", logs, "--out", str(evil["tables"].parent / "tables2")],
    }.items():
        runs[name] = CliRunner().invoke(cli, args)
    assert runs["scan"].exit_code == 1, runs["scan"].output  # the hanging transaction, and a bad segment
    for name, res in runs.items():
        assert res.exception is None or isinstance(res.exception, SystemExit), (name, res.exception)
        if name != "dump":  # dump's stdout is JSON lines
            _assert_clean(res.stdout, f"{name} stdout")
        _assert_clean(res.stderr, f"{name} stderr")
    # the names are shown, escaped: the operator still sees which partition it is
    assert "\\x1b]0;title\\x07an\\x1b[2Jsfers-0" in runs["dump"].stderr
    assert "notes\\x1b[2J\\x07.txt" in runs["dump"].stderr
    assert "\\x1b]0;title\\x07" in re.sub(r"\s", "", runs["report-table"].stdout.replace("│", ""))
    assert "\\x1b]0;title\\x07" in runs["report-markdown"].stdout
    assert "\\x1b]0;title\\x07" in runs["timeline"].stdout + runs["timeline"].stderr
    assert "\\x1b[2J\\x9b31m\\r\\x7f" in runs["coordinator"].stdout
    # JSON stays exact: the encoder escapes, a parser gets the real name back
    assert [json.loads(line) for line in runs["dump"].stdout.splitlines()]
    rep = CliRunner().invoke(cli, ["report", findings, "--format", "json"])
    assert "\x1b" not in rep.stdout
    assert any(f["topic"] == EVIL_TOPIC for f in json.loads(rep.stdout)["findings"])


def test_no_raw_escapes_on_a_real_tty(evil):
    """The same through a pseudo-terminal (``script``): rich styles its own output then, so only
    its SGR colour sequences may appear; nothing from the names (no OSC title, no clear, no BEL)."""
    py = shlex.quote(sys.executable)
    cmds = [f"{py} -m auditor.cli.main " + " ".join(shlex.quote(a) for a in args) for args in (
        ["dump", "--format", "table", str(evil["logs"])],
        ["dump", str(evil["part"] / "00000000000000000099.log")],
        ["tables", str(evil["tables"])],
        ["report", str(evil["findings"]), "--format", "table"],
        # Markdown asked for on a terminal goes to a file (the path on stderr): checked below
        ["report", str(evil["findings"]), "--format", "markdown", "--report-file", str(evil["findings"].parent / "r.md")],
        ["coordinator", str(evil["tables"]), EVIL_ID],
    )]
    res = subprocess.run(["script", "-qec", "; ".join(cmds), "/dev/null"], capture_output=True, timeout=300,
                         cwd=PROJECT, env={**os.environ, "COLUMNS": "200", "TERM": "xterm-256color"})
    raw = res.stdout.decode("utf-8", "replace")
    assert "report" in raw and "\\x1b]0;title\\x07" in raw, raw[-3000:]
    assert "\x07" not in raw and "\x1b]" not in raw and "\x1b[2J" not in raw and "\x9b" not in raw
    # every ESC left is rich's own styling (SGR) or cursor show/hide
    rest = re.sub(r"\x1b\[[0-9;]*m|\x1b\[\?25[hl]", "", raw)
    assert "\x1b" not in rest, repr(rest[rest.index("\x1b") - 80:][:200])
    md = (evil["findings"].parent / "r.md").read_text()
    assert "\\x1b]0;title\\x07" in md and "\x1b" not in md and "\x07" not in md
