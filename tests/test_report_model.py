"""The report model, filters, escaping and renderers on hand-made findings (no Spark).

The hostile values are what a producer controls: a transactional id is any
string, and a topic name comes from a directory name in the dump.
"""

from __future__ import annotations

import io
import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from markdown_it import MarkdownIt
from rich.console import Console

from report_helpers import dump_dom, has_class, parse_html, table_rows
from auditor.cli.main import cli
from auditor.cli.progress import StageProgress
from auditor.engine.runner import AuditResult, write_findings
from auditor.engine.findings import FINDING_COLUMNS
from auditor.report.spark.data import empty_summary
from auditor.report import Filters, build_report, load_report, render
from auditor.engine.rule import catalog
from auditor.engine.messages import render as render_detection
from auditor.report.model import FindingsDirError, format_duration, load_findings_dir, parse_duration, parse_time
from auditor.report.render_markdown import md_code_block, md_text
from auditor.report.render_table import render_table

PROJECT = Path(__file__).resolve().parents[1]
T0 = 1_714_564_800_000  # 2024-05-01T12:00:00Z

HOSTILE_IDS = ["[red]x[/red]", "<script>alert(1)</script>", "a|b `c` **d** [l](http://e) @here #1 $x$ ~~s~~ \\"]


def finding(**kw) -> dict:
    """A finding as the engine makes it: a detection of a real rule's kind, rendered
    (auditor.engine.messages), then any non-location field overridden (severity, message)."""
    rule = catalog()[kw.pop("rule", "hanging-transaction")]
    kind = kw.pop("kind", "hanging" if rule.id == "hanging-transaction" else next(iter(rule.kinds)))
    ev = {n: None for n in rule.evidence_types}
    ev.update(kw.pop("evidence", {"coordinator_epoch": 3} if rule.id == "hanging-transaction" else {}))
    loc = dict(cluster_id="c1", broker_id=1, log_dir="/d/b1", topic="orders", partition=0, producer_id=7,
               producer_epoch=2, transactional_id="orders-txn", first_offset=100, last_offset=105, first_timestamp=T0,
               last_timestamp=T0 + 5_000, duration_ms=600_000)
    loc.update({k: kw.pop(k) for k in list(kw) if k in loc})
    f = render_detection(rule, {**loc, "kind": kind, "evidence": ev})
    f.update(kw)
    return f


SAMPLE = [
    finding(),
    finding(topic="payments", partition=3, producer_id=8, producer_epoch=0, transactional_id="pay-1", severity="critical",
            first_offset=10, first_timestamp=T0 + 3_600_000, last_timestamp=T0 + 3_700_000, duration_ms=20_000,
            evidence={"coordinator_epoch": 0}),
    finding(rule="stuck-lso", kind="open", topic="orders", partition=1, producer_id=9, transactional_id=None,
            duration_ms=None),
    finding(rule="pid-block-overlap", kind="overlap", severity="warning", topic=None, partition=None, producer_id=None,
            transactional_id=None, first_timestamp=None, last_timestamp=None, duration_ms=None, first_offset=500,
            last_offset=999),
]


# -- parsing -------------------------------------------------------------------------


@pytest.mark.parametrize("text,ms", [("30s", 30_000), ("15m", 900_000), ("2h", 7_200_000), ("1d", 86_400_000),
                                     ("250ms", 250), ("1500", 1500), ("1.5s", 1500), (" 2H ", 7_200_000)])
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "abc", "10x", "-5s", "5 minutes"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("text", ["2024-05-01T12:00:00Z", "2024-05-01T14:00:00+02:00", "2024-05-01 12:00",
                                  "2024-05-01T12:00:00.000z", str(T0)])
def test_parse_time(text):
    assert parse_time(text) == T0


def test_parse_time_date_only_is_utc_midnight_and_rejects_junk():
    assert parse_time("2024-05-01") == T0 - 12 * 3_600_000
    for bad in ("yesterday", "2024-13-01", "12:00"):
        with pytest.raises(ValueError):
            parse_time(bad)


def test_format_duration():
    assert [format_duration(v) for v in (None, 850, 42_000, 192_000, 18_420_000, 183_600_000)] == [
        "", "850ms", "42s", "3m12s", "5h07m", "2d03h"]


# -- filters ---------------------------------------------------------------------------


def _shown(**kw) -> list[tuple]:
    return [(f["rule"], f["topic"], f["partition"]) for f in Filters(**kw).apply(SAMPLE)]


def test_filters_each_option():
    assert _shown(topics=("pay*",)) == [("hanging-transaction", "payments", 3)]
    assert _shown(topics=("ORD*",)) == []  # case-sensitive, like topic names
    assert _shown(topics=("pay*", "ord*")) == [("hanging-transaction", "orders", 0), ("hanging-transaction", "payments", 3),
                                               ("stuck-lso", "orders", 1)]
    assert _shown(partitions=(1, 3)) == [("hanging-transaction", "payments", 3), ("stuck-lso", "orders", 1)]
    assert _shown(producer_ids=(7,)) == [("hanging-transaction", "orders", 0)]
    assert _shown(transactional_id="^pay") == [("hanging-transaction", "payments", 3)]
    assert _shown(transactional_id="txn") == [("hanging-transaction", "orders", 0)]  # searched anywhere; null ids never match
    assert _shown(rules=("stuck-lso", "pid-block-overlap")) == [("stuck-lso", "orders", 1), ("pid-block-overlap", None, None)]
    assert _shown(min_severity="warning") == [("hanging-transaction", "orders", 0), ("hanging-transaction", "payments", 3),
                                              ("pid-block-overlap", None, None)]
    assert _shown(min_duration_ms=parse_duration("5m")) == [("hanging-transaction", "orders", 0)]  # null durations drop


def test_time_window_keeps_overlapping_spans_and_drops_timeless_findings():
    # orders-0 spans [T0, T0+5s]; payments-3 spans [T0+1h, T0+1h40s]
    assert _shown(since_ms=T0 + 4_000) == [("hanging-transaction", "orders", 0), ("hanging-transaction", "payments", 3),
                                           ("stuck-lso", "orders", 1)]
    assert _shown(since_ms=T0 + 6_000) == [("hanging-transaction", "payments", 3)]
    assert _shown(until_ms=T0 + 3_600_000) == [("hanging-transaction", "orders", 0), ("hanging-transaction", "payments", 3),
                                               ("stuck-lso", "orders", 1)]
    assert _shown(until_ms=T0 - 1) == []
    assert _shown(since_ms=T0 + 10_000, until_ms=T0 + 20_000) == []  # between the two spans
    assert ("pid-block-overlap", None, None) not in _shown(since_ms=0)


def test_filters_combine_with_and():
    assert _shown(topics=("orders",), min_severity="error") == [("hanging-transaction", "orders", 0)]
    assert _shown(topics=("orders",), producer_ids=(8,)) == []


def test_report_orders_by_severity_and_counts_before_filters():
    rep = build_report(SAMPLE, filters=Filters(min_severity="warning"))
    assert [f["severity"] for f in rep.findings] == ["critical", "error", "warning"]
    assert rep.total_findings == 4 and rep.by_severity() == {"critical": 1, "error": 1, "warning": 1, "info": 0}
    assert list(rep.by_rule()) == ["hanging-transaction", "pid-block-overlap"]


# -- remediation ---------------------------------------------------------------------------


def test_remediation_commands_both_forms_and_placeholder():
    rep = build_report([finding()], bootstrap_server="kafka-1:9092")
    assert rep.commands(rep.findings[0]) == [
        {"command": "kafka-transactions.sh --bootstrap-server kafka-1:9092 abort --topic orders --partition 0 --start-offset 100",
         "applies_to": None},
        {"command": "kafka-transactions.sh --bootstrap-server kafka-1:9092 abort --topic orders --partition 0 "
                    "--producer-id 7 --producer-epoch 2 --coordinator-epoch 3", "applies_to": "brokers before 3.0"},
    ]
    # the stored commands keep the placeholder: a report without --bootstrap-server shows it
    assert build_report([finding()]).findings[0]["remediation_commands"][0]["command"].startswith(
        "kafka-transactions.sh --bootstrap-server <broker:port> abort")
    # advice without commands (an open transaction that may still complete), and a kind with neither
    assert finding(rule="stuck-lso", kind="open")["remediation_commands"] == []
    assert finding(rule="hanging-transaction", kind="in-flight")["remediation_commands"] == []
    assert finding(rule="hanging-transaction", kind="in-flight")["remediation"] is None


def test_a_command_needing_an_unknown_value_is_left_out():
    f = finding(producer_epoch=None)
    assert [c["applies_to"] for c in f["remediation_commands"]] == [None]  # the --start-offset form needs no epoch
    assert finding(evidence={"coordinator_epoch": None})["remediation_commands"][1]["command"].endswith(
        "--coordinator-epoch 0")  # no marker known: 0, as kafka-transactions.sh expects


def test_illegal_topic_is_shell_quoted_in_commands():
    evil = "x;touch /tmp/pwned\n#"
    rep = build_report([finding(topic=evil)])
    cmds = rep.commands(rep.findings[0])
    assert cmds[0]["command"].endswith("--topic 'x;touch /tmp/pwned\n#' --partition 0 --start-offset 100")
    assert shlex.split(cmds[0]["command"])[5] == evil  # one argument, exactly the topic
    assert "--topic 'x;touch /tmp/pwned\n#' --partition 0 --producer-id 7" in cmds[1]["command"]
    text = render_table(rep)
    assert "  x;touch /tmp/pwned\\n#-0@100  " in text  # the header stays one line
    assert "\n--topic 'x;touch /tmp/pwned\\n#'" not in text and "pwned\\n#' --partition 0 --start-offset 100" in text
    assert "txn-audit timeline <TABLES> --topic 'x;touch /tmp/pwned\\n#' --partition 0 --from 100" in text


def test_table_commands_one_abort_per_finding_and_advice_once_per_kind():
    text = render_table(build_report(SAMPLE))
    lines = [ln.strip() for ln in text.splitlines()]
    assert [ln for ln in lines if ln.startswith("kafka-transactions.sh")] == [  # critical first
        "kafka-transactions.sh --bootstrap-server <broker:port> abort --topic payments --partition 3 --start-offset 10",
        "kafka-transactions.sh --bootstrap-server <broker:port> abort --topic orders --partition 0 --start-offset 100",
    ]
    # the older-broker form is left to the other formats (every supported broker takes --start-offset);
    # Markdown gives it as a comment: pasting an incident's commands aborts it once
    older = ("# brokers before 3.0: kafka-transactions.sh --bootstrap-server <broker:port> abort --topic payments "
             "--partition 3 --producer-id 8 --producer-epoch 0 --coordinator-epoch 0")
    assert older not in lines and older in render(build_report(SAMPLE), "markdown").splitlines()
    hanging_advice = [ln for ln in lines if ln.startswith("advice: abort once the partition has a leader")]
    assert len(hanging_advice) == 1  # two hanging findings, one advice
    # the next forensic command under each finding with a partition; one cluster: no --cluster
    assert "txn-audit timeline <TABLES> --topic payments --partition 3 --from 10 --producer-id 8" in lines
    assert not any("--cluster" in ln for ln in lines)


def test_next_command_uses_the_runs_tables_and_names_the_cluster_when_several():
    from auditor.report.model import timeline_command

    two = [finding(), finding(cluster_id="c2", topic="pay ments", first_offset=5, producer_id=None)]
    rep = build_report(two, run={"tables": "/data/my tables"})
    assert rep.next_command(rep.findings[0]) == (
        "txn-audit timeline '/data/my tables' --topic orders --partition 0 --from 100 --producer-id 7 --cluster c1")
    assert rep.next_command(rep.findings[1]) == (
        "txn-audit timeline '/data/my tables' --topic 'pay ments' --partition 0 --from 5 --cluster c2")
    one = build_report([finding()])
    assert one.next_command(one.findings[0]) == "txn-audit timeline <TABLES> --topic orders --partition 0 --from 100 --producer-id 7"
    assert timeline_command(finding(topic=None, partition=None)) is None


# -- escaping of untrusted text -------------------------------------------------------------------


def _hostile_report():
    fs = [finding(transactional_id=tid, evidence={"coordinator_state": tid, "coordinator_epoch": 3},
                  producer_id=i, first_offset=10 + i)
          for i, tid in enumerate(HOSTILE_IDS)]
    return build_report(fs)


def test_table_prints_markup_lookalikes_verbatim():
    text = render_table(_hostile_report(), width=250)
    assert "[red]x[/red]" in text and "<script>alert(1)</script>" in text
    assert "transactional id [red]x[/red])" in text  # in the message, too


def test_markdown_keeps_structure_and_text():
    md = render(_hostile_report(), "markdown")
    html_out = MarkdownIt("commonmark").enable("table").render(md)
    assert "<script" not in html_out and "<a " not in html_out and "<strong>d</strong>" not in html_out
    rows = [r for r in table_rows(html_out) if r and r[0].isdigit()]
    header = next(r for r in table_rows(html_out) if r and r[0] == "#")
    assert len(rows) == 3 and all(len(r) == len(header) for r in rows)  # no `|` split a cell
    ids = [r[header.index("TransactionalId")] for r in rows]
    assert sorted(ids) == sorted(HOSTILE_IDS)  # rendered back to the exact ids
    assert md_text("a|b") == "a\\|b" and md_text("<b>") == "&lt;b&gt;"


def test_markdown_code_fence_cannot_be_closed_from_inside():
    block = md_code_block(["echo ```` no"])
    fence = block.splitlines()[0][:-2]
    assert fence == "`" * 5 and block.endswith("\n" + fence)
    rendered = MarkdownIt("commonmark").render(block)
    assert rendered.count("<pre>") == 1 and "echo ```` no" in rendered


def test_html_escapes_everywhere(tmp_path):
    page = render(_hostile_report(), "html")
    p = parse_html(page)
    assert [t for t, _ in p.tags if t == "script"] == []
    cells = [text for tag, attrs, text in p.texts if tag == "td" and has_class(attrs, "id")]
    assert sorted(cells) == sorted(HOSTILE_IDS)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    # a browser sees the same: no script element, no console message (script errors, CSP violations)
    f = tmp_path / "hostile.html"
    f.write_text(page)
    dom, console = dump_dom(f)
    assert console == []
    d = parse_html(dom)
    assert [t for t, _ in d.tags if t == "script"] == []
    assert sorted(text for tag, attrs, text in d.texts if tag == "td" and has_class(attrs, "id")) == sorted(HOSTILE_IDS)


def test_console_check_catches_a_page_that_errs(tmp_path):
    """The negative control for the check above and in test_report_cli: it does see errors."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>throw new Error('boom')</script></body></html>")
    _, console = dump_dom(bad)
    assert any("Uncaught Error: boom" in line for line in console), console


def test_json_round_trips_the_ids():
    data = json.loads(render(_hostile_report(), "json"))
    assert sorted(f["transactional_id"] for f in data["findings"]) == sorted(HOSTILE_IDS)
    lines = [json.loads(x) for x in render(_hostile_report(), "jsonl").splitlines()]
    # each line stands alone: the report's schema version first, then the finding as in the JSON report
    assert all(list(x)[0] == "schema_version" and x["schema_version"] == data["schema_version"] for x in lines)
    assert [{k: v for k, v in x.items() if k != "schema_version"} for x in lines] == data["findings"]


# -- findings directories ------------------------------------------------------------------------


def _write(tmp_path: Path, findings: list[dict], summary: dict | None = None, plots: dict | None = None) -> Path:
    out = tmp_path / "findings"
    res = AuditResult(findings=findings, as_of_ms=T0 + 7_200_000, summary=summary or {}, plots=plots or {})
    write_findings(None, res, str(out))  # pyarrow only: the spark argument is unused
    return out


def test_findings_dir_round_trip(tmp_path):
    out = _write(tmp_path, SAMPLE, summary={"inputs": ["/data/b1"], "partitions": 3, "batches": 42})
    rows, manifest, plots = load_findings_dir(out)
    assert len(rows) == 4 and manifest["summary"]["batches"] == 42 and plots == {}
    rep = load_report(out, Filters(topics=("orders",)))
    assert [f["partition"] for f in rep.findings] == [0, 1] and rep.inputs == ["/data/b1"]
    # the Parquet map of strings back to the declared types
    assert rep.findings[0]["evidence"]["coordinator_epoch"] == 3 and rep.findings[0]["evidence"]["age_only"] is None
    assert rep.findings[0]["remediation_commands"] == SAMPLE[0]["remediation_commands"]
    assert rep.findings[0]["replicas"] == []
    data = json.loads(render(rep, "json"))
    assert data["summary"]["findings"] == 2 and data["summary"]["findings_before_filters"] == 4
    assert data["summary"]["filters"] == {"topic": ["orders"]} and data["inputs"] == ["/data/b1"]
    assert data["summary"]["batches"] == 42


def test_not_a_findings_dir(tmp_path):
    for bad in (tmp_path / "missing", tmp_path):
        with pytest.raises(FindingsDirError):
            load_findings_dir(bad)
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "_audit.json").write_text("{}")
    (junk / "part-00000.parquet").write_bytes(b"not parquet")
    with pytest.raises(FindingsDirError, match="cannot read"):
        load_findings_dir(junk)
    res = CliRunner().invoke(cli, ["report", str(junk), "--format", "json"])
    assert res.exit_code == 2 and res.stdout == "" and "cannot read findings" in res.stderr


def test_report_cli_options_and_exit_status(tmp_path):
    out = _write(tmp_path, SAMPLE)
    run = lambda *a: CliRunner().invoke(cli, ["report", str(out), *a])  # noqa: E731
    res = run("--format", "jsonl")
    assert res.exit_code == 1 and len(res.stdout.splitlines()) == 4  # critical and error reach --fail-on error
    assert run("--fail-on", "critical", "--topic", "orders").exit_code == 0
    assert run("--severity", "critical", "--fail-on", "critical").exit_code == 1
    res = run("--format", "json", "--since", "2024-05-01T12:30:00Z", "--min-duration", "10s", "--bootstrap-server", "k1:9092")
    data = json.loads(res.stdout)
    assert [(f["topic"], f["partition"]) for f in data["findings"]] == [("payments", 3)]
    assert data["findings"][0]["remediation_commands"][0]["command"].startswith("kafka-transactions.sh --bootstrap-server k1:9092 abort")
    for bad in (["--since", "tomorrow"], ["--min-duration", "5 parsecs"], ["--transactional-id", "(unclosed"],
                ["--severity", "fatal"], ["--format", "pdf"], ["--since", "2024-05-02", "--until", "2024-05-01"]):
        r = run(*bad)
        assert r.exit_code == 2 and r.stdout == "", (bad, r.output)


def test_progress_bars_only_on_a_terminal():
    buf = io.StringIO()
    with StageProgress(Console(file=buf, force_terminal=True, width=100), enabled=True) as p:
        step = p.stage("rules")
        for i, name in enumerate(["a-rule", "[bold]b-rule"]):
            step(name, i, 2)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", buf.getvalue())
    assert "rules" in text and "2/2" in text
    quiet = StageProgress(Console(file=io.StringIO(), force_terminal=False), enabled=True)
    assert quiet.stage("rules") is None  # not a terminal: no bars
    assert StageProgress(Console(file=io.StringIO(), force_terminal=True), enabled=False).stage("rules") is None


def test_json_schema_is_documented():
    """Every key the JSON report can hold is described in docs/report-format.md."""
    doc = (PROJECT / "docs" / "report-format.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", doc, re.M))
    out_keys = {"schema_version", "generated_by", "findings", "summary", "inputs"}
    finding_keys = {name for name, _ in FINDING_COLUMNS}
    summary_keys = set(json.loads(render(build_report(SAMPLE), "json"))["summary"]) | (set(empty_summary()) - {"inputs"})
    assert (finding_keys | summary_keys) - documented == set()
    assert all(f'"{k}"' in doc for k in out_keys)


@pytest.mark.parametrize("width", [80, 120])
def test_table_layout_one_header_per_finding_critical_first(width):
    rep = build_report(SAMPLE)
    text = render_table(rep, width=width)
    lines = text.splitlines()
    heads = [ln.split()[0] for ln in lines if ln[:1].isalpha() and ln.split()[0] in ("critical", "error", "warning", "info")]
    assert heads == ["critical", "error", "warning", "info"]
    first = next(ln for ln in lines if ln.startswith("critical"))
    assert "hanging-transaction/hanging" in first and "payments-3@10" in first and "producer 8/0" in first
    assert "txid pay-1" in text and "age 20s" in text and "age 10m00s" in text
    assert all(len(ln) <= width for ln in lines if not ln.strip().startswith(("kafka-transactions.sh", "#", "txn-audit ")))
    assert all(not ln.endswith("-") for ln in lines)
    assert "4 findings: 1 critical, 1 error, 1 warning, 1 info" in text


def test_table_summary_is_compact_and_groups_input_lacks():
    summary = {"inputs": ["/in/a"], "clusters": [{"cluster_id": "c1"}], "brokers": [{"broker_id": 1, "log_dir": "/d/b1"}],
               "partitions": 4, "batches": 79, "transactions": {"commit": 3, "open": 1},
               "transaction_versions": {"seen": ["2"]}, "time_range": {"first_ms": T0, "last_ms": T0 + 1000},
               "input_lacks": [f"cluster c{i}: no __transaction_state partition given" for i in range(5)]
               + ["log dir /d/b1: no log-start-offset-checkpoint given"]}
    rep = build_report(SAMPLE[:2], summary=summary, run={"as_of_ms": T0 + 10_000, "source": "/f"})
    text = render_table(rep, width=120)
    head = text.split("\n\n", 1)[0].splitlines()
    assert head[0] == "txn-audit report" and head[1] == "2 findings: 1 critical, 1 error"
    assert head[2] == "1 cluster (c1), 1 broker, 4 partitions, 79 batches"
    assert head[3] == "Ages as of 2024-05-01T12:00:10.000Z"  # a run that does not say its source (older)
    assert head[4].startswith("Transactions: 3 committed, 1 open · versions 2")
    assert "Input lacks:" in head and (
        "  - no __transaction_state partition given (clusters c0, c1, c2 +2 more)") in head
    assert "  - no log-start-offset-checkpoint given (log dir /d/b1)" in head
    # one input and one broker are named above (or typed by the user): not listed again
    assert "Inputs:" not in text and "Brokers (log dirs):" not in text
    two = build_report(SAMPLE[:2], summary={**summary, "inputs": ["/in/a", "/in/b"], "brokers": [
        {"broker_id": 1, "log_dir": "/d/b1"}, {"broker_id": 2, "log_dir": "/d/b2"}]}, run={"source": "/f"})
    assert "Inputs: /in/a, /in/b" in render_table(two) and "Brokers (log dirs): 1:/d/b1, 2:/d/b2" in render_table(two)


def test_report_runs_without_spark(tmp_path):
    """`txn-audit report` never imports pyspark (so never starts a JVM)."""
    import subprocess
    import sys

    out = _write(tmp_path, SAMPLE)
    code = ("import sys\nfrom auditor.cli.main import cli\n"
            "try:\n    cli(['report', sys.argv[1], '--format', 'html'])\nexcept SystemExit as e:\n    code = e.code\n"
            "sys.stderr.write(f'exit={code} pyspark={\"pyspark\" in sys.modules} py4j={\"py4j\" in sys.modules}')")
    res = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=120, cwd=PROJECT)
    assert res.stderr.endswith("exit=1 pyspark=False py4j=False"), res.stderr[-500:]
    assert res.stdout.startswith("<!DOCTYPE html>")


def test_a_guarded_abort_is_a_comment_on_every_line_in_the_terminal_and_markdown():
    """An overdue transaction (no coordinator record): the checks that ask the coordinator are commands,
    the abort after them is a shell comment on every line it wraps to, so pasting the incident's lines runs
    the checks and never the abort; Markdown gives it as one comment line."""
    rep = build_report([finding(kind="overdue", evidence={"age_only": True})])
    lines = [ln.strip() for ln in render_table(rep, width=80).splitlines()]
    checks = [i for i, ln in enumerate(lines) if ln.startswith("kafka-transactions.sh") and "abort" not in ln]
    guarded = [i for i, ln in enumerate(lines) if ln.startswith("#")]
    assert checks and guarded and max(checks) < min(guarded)
    assert not any(ln.startswith("kafka-transactions.sh") and " abort " in ln for ln in lines)
    assert any("--start-offset 100" in lines[i] for i in guarded)
    assert guarded == list(range(guarded[0], guarded[-1] + 1))  # one block, every line commented
    md = render(rep, "markdown").splitlines()
    assert [ln for ln in md if " abort " in ln and ln.startswith("kafka-transactions.sh")] == []
    assert any(ln.startswith("# only if find-hanging lists the partition") and "--start-offset 100" in ln for ln in md)


def test_the_header_says_which_max_timeout_was_assumed_and_from_where():
    """Verdicts depend on transaction.max.timeout.ms: the terminal, Markdown and JSON say which one the
    run assumed, and whether it was given or Kafka's default; an older findings directory says nothing."""
    assumed = build_report([finding()], run={"max_timeout_ms": 900_000, "max_timeout_given": False})
    given = build_report([finding()], run={"max_timeout_ms": 60_000, "max_timeout_given": True})
    text = render_table(assumed, width=80)
    assert "Timeouts: transaction.max.timeout.ms 15m00s (Kafka's default, assumed)" in text.splitlines()  # one line
    assert "transaction.max.timeout.ms 1m00s (--max-timeout-ms)" in " ".join(render_table(given, width=80).split())
    assert "Kafka" in render(assumed, "markdown") and "15m00s" in render(assumed, "markdown")
    assert (assumed.summary_json()["max_timeout_ms"], assumed.summary_json()["max_timeout_source"]) == (
        900_000, "kafka-default")
    assert given.summary_json()["max_timeout_source"] == "given"
    old = build_report([finding()])
    assert old.timeout_text() is None and "Timeouts:" not in render_table(old)
