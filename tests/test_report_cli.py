"""``scan`` / ``audit`` / ``report`` on captured scenarios: every format's shape and values.

One ``scan`` (CliRunner, shared Spark session) of three scenarios — a late
write after an abort (TV0, 3.5.2), TV2 fencing (no findings) and a broker
killed with transactions open (4.3.1) — writes a findings directory; every
format is then rendered from it by ``report`` (no Spark). Expected values come
from each scenario's expected.json (what the clients did), not from earlier
output of the auditor.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from markdown_it import MarkdownIt

from conftest import SAMPLE_LOGS
from test_terminal import logical_lines
from report_helpers import dump_dom, has_class, layout, parse_html, png_info, screenshot, table_rows
from auditor.cli.main import cli
from auditor.report.svg import esc

pytestmark = pytest.mark.spark

NAMES = ["hanging-late-write", "fencing-tv2", "open-at-crash"]
SCENARIOS = [SAMPLE_LOGS / n for n in NAMES]


def expected(name: str) -> dict:
    return json.loads((SAMPLE_LOGS / name / "expected.json").read_text())


def abort_line(topic: str, partition: int, offset: int) -> str:
    return f"kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {topic} --partition {partition} --start-offset {offset}"


@pytest.fixture(scope="module")
def scanned(spark, tmp_path_factory):
    """(scan result, findings dir, tables dir): one scan, not quiet, output not a terminal.
    Only the two rules with findings here run (test_scenarios shows the others find nothing
    in these scenarios): the report is under test, not the rule catalog."""
    base = tmp_path_factory.mktemp("report")
    res = CliRunner().invoke(cli, ["scan", *map(str, SCENARIOS), "--tables", str(base / "tables"),
                                   "--out", str(base / "findings"), "--format", "json",
                                   "--rule", "hanging-transaction", "--rule", "stuck-lso"])
    return res, base / "findings", base / "tables"


def report(findings: Path, *args: str):
    return CliRunner().invoke(cli, ["report", str(findings), *args])


def test_scan_json_matches_the_scenarios(scanned):
    res, findings_dir, _ = scanned
    assert res.exit_code == 1, res.output  # a critical late write: --fail-on error
    assert res.stderr == "", res.stderr  # stderr is not a terminal: no progress bars, and no input was bad
    data = json.loads(res.stdout)
    assert data["schema_version"] == 3
    assert data["inputs"] == [str(p.absolute()) for p in SCENARIOS]
    by_cluster = {}
    for f in data["findings"]:
        by_cluster.setdefault(f["cluster_id"], []).append(f)
    cid = {n: expected(n)["broker"]["cluster_id"] for n in NAMES}
    assert cid["fencing-tv2"] not in by_cluster  # a clean scenario

    late = expected("hanging-late-write")["expect"]["anomalies"][0]
    hang = [f for f in by_cluster[cid["hanging-late-write"]] if f["rule"] == "hanging-transaction"]
    assert [(f["topic"], f["partition"], f["producer_id"], f["producer_epoch"], f["transactional_id"], f["first_offset"],
             f["last_offset"]) for f in hang] == [(late["topic"], late["partition"], late["producer_id"], late["producer_epoch"],
                                                   late["transactional_id"], late["first_offset"], late["last_offset"])]
    h = hang[0]
    assert h["severity"] == "critical" and h["kind"] == "late-write"
    assert h["evidence"]["previous_marker_offset"] == late["after_marker_offset"]
    assert [c["command"] for c in h["remediation_commands"]] == [
        abort_line(late["topic"], late["partition"], late["first_offset"]),
        f"kafka-transactions.sh --bootstrap-server <broker:port> abort --topic {late['topic']} --partition {late['partition']} "
        f"--producer-id {late['producer_id']} --producer-epoch {late['producer_epoch']} --coordinator-epoch {h['evidence']['coordinator_epoch']}"]
    assert [c["applies_to"] for c in h["remediation_commands"]] == [None, "brokers before 3.0"]
    ends = expected("hanging-late-write")["expect"]["end_offsets_before_shutdown"]["transfers-0"]
    lso = [f for f in by_cluster[cid["hanging-late-write"]] if f["rule"] == "stuck-lso"]
    assert [(f["first_offset"], f["last_offset"]) for f in lso] == [(ends["last_stable_offset"], ends["high_watermark"] - 1)]

    crash = expected("open-at-crash")["expect"]["anomalies"]
    got = {(f["topic"], f["partition"], f["first_offset"], f["last_offset"], f["severity"])
           for f in by_cluster[cid["open-at-crash"]] if f["rule"] == "hanging-transaction"}
    assert got == {(a["topic"], a["partition"], a["first_offset"], a["last_offset"], "info") for a in crash}

    s = data["summary"]
    assert s["findings"] == len(data["findings"]) == sum(s["by_severity"].values())
    assert s["by_severity"]["critical"] == 1 and s["by_rule"]["stuck-lso"] == 3
    assert [b["log_dir"] for b in sorted(s["brokers"], key=lambda b: b["log_dir"])] == sorted(
        str((p / "broker-1").absolute()) for p in SCENARIOS)
    assert s["batches"] == json.loads((scanned[2] / "_ingest.json").read_text())["tables"]["batches"]
    assert (findings_dir / "part-00000.parquet").exists() and (findings_dir / "_plots.json").exists()


def test_summary_transactions_and_versions_match_what_the_clients_did(scanned):
    data = json.loads(scanned[0].stdout)
    s = data["summary"]
    counts = {n: expected(n)["expect"]["counts"] for n in NAMES}
    total = lambda key: sum(c[key] for per in counts.values() for c in per.values())  # noqa: E731
    assert s["transactions"] == {"commit": total("committed"), "abort": total("aborted"), "open": total("open")}
    clusters = {c["cluster_id"]: c for c in s["clusters"]}
    for n in NAMES:
        exp = expected(n)
        c = clusters[exp["broker"]["cluster_id"]]
        commits = sum(v["committed"] for v in counts[n].values())
        tvs = {t["transaction_version"] for t in exp["transactions"] if t["outcome"] == "COMMIT"}
        # TV2 commits carry data epoch + 1; TV0/1 commits keep the data epoch
        assert c["commit_markers"] == {"same_epoch": commits if tvs <= {0, 1} else 0,
                                       "epoch_bump": commits if tvs == {2} else 0}, n
        assert c["transaction_version_feature"] == (None if exp["kafka_version"].startswith("3.") else 2), n
    assert s["transaction_versions"]["seen"] == ["0/1", "2"]


def test_plot_data_matches_the_scenarios(scanned):
    plots = json.loads((scanned[1] / "_plots.json").read_text())
    parts = {(p["topic"], p["partition"]): p for p in plots["partitions"]}
    assert set(parts) == {("transfers", 0), ("payments", 0), ("payments", 1)}  # partitions with findings only
    for name, key in (("hanging-late-write", "transfers-0"), ("open-at-crash", "payments-0"), ("open-at-crash", "payments-1")):
        topic, part = key.rsplit("-", 1)
        p = parts[(topic, int(part))]
        end = expected(name)["expect"]["end_offsets_before_shutdown"][key]
        last = p["lso_lag"][-1]
        assert (last["log_end"], last["lso"], last["lag"]) == (
            end["high_watermark"], end["last_stable_offset"], end["high_watermark"] - end["last_stable_offset"]), key
        assert all(0 <= pt["lag"] == pt["log_end"] - pt["lso"] for pt in p["lso_lag"])
        assert [pt["t"] for pt in p["lso_lag"]] == sorted(pt["t"] for pt in p["lso_lag"])
        states = [s["state"] for s in p["sessions"]]
        c = expected(name)["expect"]["counts"][key]
        assert (states.count("commit"), states.count("abort"), states.count("open")) == (c["committed"], c["aborted"], c["open"]), key


def test_report_table_format(scanned):
    res = report(scanned[1], "--format", "table")
    assert res.exit_code == 1
    out = res.stdout
    lines = out.splitlines()
    assert lines[0] == "txn-audit report" and "versions 0/1, 2" in out
    late = expected("hanging-late-write")["expect"]["anomalies"][0]
    findings = json.loads(scanned[0].stdout)["findings"]
    heads = [ln for ln in lines if ln.split(" ", 1)[0] in ("critical", "error", "warning", "info")]
    # one header per incident (a hanging transaction and the LSO it pins are one), critical first
    incidents = {f["incident"] for f in findings}
    assert len(findings) == 6 and len(heads) == len(incidents) == 3 and heads[0].startswith("critical")
    crit = heads[0]
    assert f"{late['topic']}-{late['partition']}@{late['first_offset']}" in crit
    assert f"producer {late['producer_id']}/" in crit and f"txid {late['transactional_id']}" in crit
    # its message under it, then the command on a line of its own, unfolded: paste-able
    message = next(f["message"] for f in findings if f["severity"] == "critical")
    assert message[:60] in out
    lines = logical_lines(lines)  # a command broken over lines with continuations, pasted
    assert abort_line(late["topic"], late["partition"], late["first_offset"]) in [ln.strip() for ln in lines]
    # the next forensic command over the tables the scan kept (the scan names them when it sets run.tables)
    # starting at the marker the late write follows, the finding's evidence (started at the data, the
    # replay would not know of the marker)
    assert any(ln.strip().startswith("txn-audit timeline ") and f"--topic {late['topic']} --partition {late['partition']} "
               f"--from {late['after_marker_offset']}" in ln for ln in lines)


def test_report_markdown_format(scanned):
    res = report(scanned[1], "--format", "markdown", "--rule", "hanging-transaction")
    assert res.exit_code == 1
    html_out = MarkdownIt("commonmark").enable("table").render(res.stdout)
    p = parse_html(html_out)
    assert [t for tag, _, t in p.texts if tag == "h2"] == ["Incidents", "Findings by rule"]
    h3 = [t for tag, _, t in p.texts if tag == "h3"]
    # one incident above info (the late write), then the rule's table of every finding
    assert len(h3) == 2 and h3[0].startswith("1. critical: hanging-transaction/late-write at ")
    assert h3[1] == "hanging-transaction (3)"
    rows = table_rows(html_out)
    header = next(r for r in rows if r and r[0] == "#")
    body = [dict(zip(header, r)) for r in rows if r and r[0].isdigit()]
    late = expected("hanging-late-write")["expect"]["anomalies"][0]
    crash = expected("open-at-crash")["expect"]["anomalies"]
    assert [(r["Topic"], int(r["Partition"]), int(r["StartOffset"]), r["TransactionalId"]) for r in body] == [
        (late["topic"], late["partition"], late["first_offset"], late["transactional_id"]),
        *sorted((a["topic"], a["partition"], a["first_offset"], a["transactional_id"]) for a in crash)]
    assert body[0]["Severity"] == "critical" and body[0]["Message"].startswith("late write on ")
    code = [t for tag, _, t in p.texts if tag == "code" and "kafka-transactions.sh" in t]
    assert len(code) == 1 and abort_line(late["topic"], late["partition"], late["first_offset"]) in code[0].splitlines()


def test_report_jsonl_and_filters(scanned):
    all_ = [json.loads(x) for x in report(scanned[1], "--format", "jsonl").stdout.splitlines()]
    assert len(all_) == json.loads(scanned[0].stdout)["summary"]["findings"]

    def rows(*args):
        r = report(scanned[1], "--format", "jsonl", *args)
        return r.exit_code, [(f["rule"], f["topic"], f["partition"]) for f in map(json.loads, r.stdout.splitlines())]

    assert rows("--topic", "trans*") == (1, [("hanging-transaction", "transfers", 0), ("stuck-lso", "transfers", 0)])
    # stuck-lso carries the pinning transaction's transactional id (the model's verdict row: one per transaction)
    assert rows("--transactional-id", "^pay", "--fail-on", "critical") == (0, [
        ("hanging-transaction", "payments", 0), ("hanging-transaction", "payments", 1),
        ("stuck-lso", "payments", 0), ("stuck-lso", "payments", 1)])
    assert rows("--partition", "1", "--producer-id", "0") == (0, [("hanging-transaction", "payments", 1), ("stuck-lso", "payments", 1)])
    assert rows("--severity", "critical") == (1, [("hanging-transaction", "transfers", 0)])
    late = next(f for f in all_ if f["severity"] == "critical")
    assert rows("--since", str(late["last_timestamp"] + 1)) == (0, [])
    assert rows("--until", str(late["first_timestamp"] - 60_000)) == (0, [])
    # only the late write has been open longer than the in-flight ones (its duration is the age at the dump's end)
    longest = max(f["duration_ms"] for f in all_ if f["rule"] == "hanging-transaction" and f["severity"] == "info")
    assert late["duration_ms"] > longest
    assert rows("--min-duration", str(longest + 1), "--rule", "hanging-transaction") == (1, [("hanging-transaction", "transfers", 0)])


def test_report_html_renders_in_chromium(scanned, tmp_path):
    res = report(scanned[1], "--format", "html", "--bootstrap-server", "kafka-1:9092")
    assert res.exit_code == 1
    page = tmp_path / "report.html"
    page.write_text(res.stdout)
    assert "<script" not in res.stdout and "http://" not in res.stdout.replace("http://www.w3.org/2000/svg", "")
    dom, console = dump_dom(page)
    assert console == [], console
    d = parse_html(dom)
    n_findings = json.loads(scanned[0].stdout)["summary"]["findings"]
    assert len([1 for t, a in d.tags if t == "tr" and has_class(a, "finding")]) == n_findings
    assert len([1 for t, a in d.tags if t == "svg" and has_class(a, "lso")]) == 3
    # the producer-session chart of transfers-0 has one bar per transaction the client ran there
    articles = [text for tag, a, text in d.texts if tag == "article"]
    assert len(articles) == 3
    counts = expected("hanging-late-write")["expect"]["counts"]["transfers-0"]
    start = dom.index(">transfers-0</h3>")
    chunk = dom[start:dom.index("</article>", start)]
    bars = parse_html(chunk)
    kinds = [a["class"].split()[-1] for t, a in bars.tags if t == "rect" and has_class(a, "txn", "bar")]
    assert (kinds.count("commit"), kinds.count("abort"), kinds.count("open")) == (
        counts["committed"], counts["aborted"], counts["open"])
    late = expected("hanging-late-write")["expect"]["anomalies"][0]
    assert (f"kafka-transactions.sh --bootstrap-server kafka-1:9092 abort --topic {late['topic']} --partition "
            f"{late['partition']} --start-offset {late['first_offset']}") in dom
    # what someone on call reads first: the findings summary, in the first screenful of a laptop
    # window, one row per finding linking to its detail; nothing cut off sideways
    assert len([1 for t, a in d.tags if t == "tr" and has_class(a, "overview-row")]) == n_findings
    box = layout(page, 1280, 800)
    assert box["vh"] <= 800 and box["tops"]["overview"] < box["vh"], box["tops"]
    assert box["tops"]["overview"] < box["tops"]["findings"] < box["tops"]["remediation"] < box["tops"]["partitions"]
    assert box["overflows"] == [] and box["wide"] == [], (box["overflows"], box["wide"])
    assert box["page_scroll_width"] <= box["page_client_width"]
    # remediation per cluster: only the late write's cluster has commands here
    clusters = [text for tag, a, text in d.texts if tag == "div" and has_class(a, "cluster")]
    assert len(clusters) == 1 and expected("hanging-late-write")["broker"]["cluster_id"] in clusters[0]
    # each advice once per (rule, kind), however many findings share it
    found = json.loads(scanned[0].stdout)["findings"]
    kinds = {(f["rule"], f["kind"]) for f in found if f.get("remediation")}
    assert len([1 for t, a in d.tags if t == "div" and has_class(a, "advice")]) == len(kinds)
    for text in {f["remediation"] for f in found if f.get("remediation")}:
        n = len({(f["rule"], f["kind"]) for f in found if f.get("remediation") == text})
        assert res.stdout.count(esc(text)) == n, text
    png = tmp_path / "report.png"
    screenshot(page, png)
    w, h, distinct = png_info(png)
    assert (w, h) == (1400, 2000) and distinct > 50  # a rendered page, not a blank one


def test_report_as_a_subprocess(scanned):
    exe = Path(sys.executable).with_name("txn-audit")
    res = subprocess.run([str(exe), "report", str(scanned[1]), "--format", "jsonl", "--severity", "critical"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and res.stderr == ""
    (f,) = [json.loads(x) for x in res.stdout.splitlines()]
    assert (f["topic"], f["first_offset"]) == ("transfers", expected("hanging-late-write")["expect"]["anomalies"][0]["first_offset"])
    bad = subprocess.run([str(exe), "report", str(scanned[2])], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == "" and "not a findings directory" in bad.stderr


def test_audit_shares_formats_and_filters(scanned):
    res = CliRunner().invoke(cli, ["audit", str(scanned[2]), "--rule", "stuck-lso", "--topic", "pay*",
                                   "--format", "markdown", "--quiet", "--fail-on", "info"])
    assert res.exit_code == 1, res.output
    assert "## stuck-lso (2)" in res.stdout and "transfers" not in res.stdout.split("## stuck-lso")[1]
    not_tables = CliRunner().invoke(cli, ["audit", str(scanned[1]), "--quiet"])
    assert not_tables.exit_code == 2 and "not an ingested tables directory" in not_tables.stderr


def test_scan_with_nothing_readable_exits_2(spark, tmp_path):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a kafka log dir")
    res = CliRunner().invoke(cli, ["scan", str(junk), str(tmp_path / "missing"), "--tables", str(tmp_path / "t"),
                                   "--format", "json"])
    assert res.exit_code == 2 and res.stdout == "" and "no input file was readable" in res.stderr


def test_the_printed_timeline_shows_what_the_finding_says(scanned):
    """The timeline command a late-write finding prints, run as printed (the scan's kept tables in place
    of <TABLES>), marks the write late at the finding's first offset, after the marker it cites."""
    import shlex

    res, findings_dir, tables = scanned
    late = expected("hanging-late-write")["expect"]["anomalies"][0]
    out = report(findings_dir, "--rule", "hanging-transaction", "--format", "table").stdout
    line = next(ln.strip() for ln in out.splitlines() if ln.strip().startswith("txn-audit timeline ")
                and f"--topic {late['topic']} --partition {late['partition']} " in ln)
    args = [a if a != "<TABLES>" else str(tables) for a in shlex.split(line)[1:]]
    got = CliRunner().invoke(cli, [*args, "--format", "jsonl"])
    assert got.exit_code == 0, got.output
    events = [json.loads(x) for x in got.stdout.splitlines() if x.strip()]
    assert events[0]["offset"] <= late["after_marker_offset"]
    opened = next(e for e in events if e["event"] == "data" and e["offset"] == late["first_offset"])
    assert opened["late_write"] is True and "late write" in opened["anomalies"], opened
