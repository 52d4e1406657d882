"""The command line's conventions (docs/operations.md, "Exit status", "Logs", "Where `scan` keeps
its tables"): stderr holds the tool's own lines only; bad input fails before Spark starts, naming
what was given and what is expected; one exit-status table for every command; a scan keeps its
tables and reuses them when the inputs are unchanged; every main command's --help has examples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli.main import cli
from conftest import SAMPLE_LOGS

EXE = str(Path(sys.executable).parent / "txn-audit")
SAMPLE = SAMPLE_LOGS / "hanging-late-write"
# what the JVM, log4j and Hadoop print when a session starts
JVM_NOISE = ("incubator modules", "log4j", "setLogLevel", "NativeCodeLoader", "WARN ", "Setting default log level")


def _env(tmp: Path) -> dict:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp / "cache"), "SPARK_LOCAL_IP": "127.0.0.1"}
    env.pop("TXN_AUDIT_VERBOSE", None)
    env.pop("TXN_AUDIT_LOG_DIR", None)
    env.pop("TXN_AUDIT_TABLES_HOME", None)
    return env


def _run(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=env, timeout=timeout)


# -- bad input: before Spark starts ----------------------------------------------------------------

@pytest.mark.parametrize("command", [["scan"], ["ingest", "--out", "OUT"]])
def test_missing_input_fails_fast_with_status_2(tmp_path, command):
    args = [a.replace("OUT", str(tmp_path / "t")) for a in command]
    missing = tmp_path / "no-such-logdir"
    t0 = time.monotonic()
    proc = _run([*args, str(missing)], _env(tmp_path), timeout=60)
    assert time.monotonic() - t0 < 5, "Spark was started for an input that does not exist"
    assert proc.returncode == 2, proc.stderr
    msg = " ".join(proc.stderr.split())
    assert f"{missing}: does not exist" in msg and "Expected a broker log dir" in msg, msg
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "cache" / "txn-audit" / "logs").exists()  # no JVM was started


@pytest.mark.parametrize("command", [["scan"], ["ingest", "--out", "OUT"]])
def test_empty_dir_fails_fast_with_status_2(tmp_path, command):
    args = [a.replace("OUT", str(tmp_path / "t")) for a in command]
    empty = tmp_path / "empty"
    empty.mkdir()
    t0 = time.monotonic()
    proc = _run([*args, str(empty)], _env(tmp_path), timeout=60)
    assert time.monotonic() - t0 < 5
    assert proc.returncode == 2, proc.stderr
    msg = " ".join(proc.stderr.split())
    assert f"{empty}: empty directory" in msg and "Expected" in msg and not msg.rstrip().endswith(":"), msg


def test_no_kafka_file_names_what_was_found(tmp_path):
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("not a kafka log dir")
    res = CliRunner().invoke(cli, ["scan", str(junk), "--no-keep-tables"])
    assert res.exit_code == 2
    msg = " ".join(res.stderr.split())
    assert f"{junk}: 1 file, none a Kafka file this tool decodes (notes.txt)" in msg, msg


def test_an_archive_given_as_input_says_to_unpack_it(tmp_path):
    """A ticket's attachment: the log dir as a .tar.gz, a .tar, a .zip. Each says what it is and how to
    unpack it; a tar archive is never taken for a segment (its header passes the segment sniff)."""
    import tarfile
    import zipfile

    ld = SAMPLE / "broker-1"
    with tarfile.open(tmp_path / "logs.tgz", "w:gz") as t:
        t.add(ld, arcname="broker-1")
    with tarfile.open(tmp_path / "logs.tar", "w") as t:
        t.add(ld, arcname="broker-1")
    with zipfile.ZipFile(tmp_path / "logs.zip", "w") as z:
        z.write(ld / "meta.properties", "broker-1/meta.properties")
    res = CliRunner().invoke(cli, ["scan", *(str(tmp_path / n) for n in ("logs.tgz", "logs.tar", "logs.zip")),
                                   "--no-keep-tables"])
    assert res.exit_code == 2
    msg = " ".join(res.stderr.split())
    for name, what in (("logs.tgz", "a gzip-compressed file (a .tar.gz?)"), ("logs.tar", "a tar archive"),
                       ("logs.zip", "a zip archive")):
        assert f"{tmp_path / name}: {what}, not a Kafka file: unpack it" in msg, msg


def test_batch_missing_input_fails_before_spark(tmp_path):
    t0 = time.monotonic()
    proc = _run(["batch", "--input", str(tmp_path / "gone"), "--warehouse", str(tmp_path / "wh")], _env(tmp_path), 60)
    assert time.monotonic() - t0 < 5 and proc.returncode == 2, proc.stderr
    assert f"--input {tmp_path / 'gone'}: does not exist" in " ".join(proc.stderr.split())
    assert not (tmp_path / "wh").exists()


def test_dump_of_a_missing_file_is_status_2(tmp_path):
    gone = tmp_path / "nonexistent.log"
    proc = _run(["dump", str(gone)], _env(tmp_path), 60)  # the click-free path
    assert proc.returncode == 2 and f"{gone}: no such file" in proc.stderr and proc.stdout == "", proc.stderr
    res = CliRunner().invoke(cli, ["dump", "--format", "table", str(gone)])  # through click
    assert res.exit_code == 2 and f"{gone}: no such file" in res.stderr


def test_dump_of_files_some_of_which_vanished_dumps_the_rest_with_status_1(tmp_path):
    """In a running broker's log dir a segment the shell listed can be deleted before it is read
    (retention, the cleaner): it is named, the others are dumped, status 1 (damaged input)."""
    gone = tmp_path / "00000000000000000007.log"
    seg = next((SAMPLE / "broker-1" / "transfers-0").glob("*.log"))
    proc = _run(["dump", str(gone), str(seg)], _env(tmp_path), 60)
    assert proc.returncode == 1 and f"{gone}: input path does not exist" in proc.stderr, proc.stderr
    assert proc.stdout.count('"type": "batch"') > 0
    res = CliRunner().invoke(cli, ["dump", "--format", "table", str(seg), str(gone)])
    assert res.exit_code == 1 and f"{gone}: input path does not exist" in " ".join(res.stderr.split())


def test_dump_of_a_good_file_is_status_0():
    seg = next((SAMPLE / "broker-1" / "transfers-0").glob("*.log"))
    res = CliRunner().invoke(cli, ["dump", str(seg)])
    assert res.exit_code == 0, res.stderr


def test_negative_partition_is_a_usage_error(tmp_path):
    res = CliRunner().invoke(cli, ["report", str(tmp_path), "--partition", "-1"])
    assert res.exit_code == 2 and "--partition" in res.stderr


def test_report_of_a_missing_directory_is_status_2(tmp_path):
    res = CliRunner().invoke(cli, ["report", str(tmp_path / "nothing"), "--exit-zero"])
    assert res.exit_code == 2  # --exit-zero forgives findings, not bad input


@pytest.mark.parametrize("command", ["scan", "audit", "report", "ingest", "batch"])
def test_help_has_examples(command):
    res = CliRunner().invoke(cli, [command, "--help"])
    assert res.exit_code == 0
    examples = res.output.split("Examples:", 1)
    assert len(examples) == 2 and f"txn-audit {command} " in examples[1], res.output
    assert "Exit status" in res.output


# -- a real scan, in its own process (the JVM's output is what this is about) -----------------------

@pytest.fixture(scope="module")
def scans(tmp_path_factory):
    """The same scan twice, in fresh processes with a fresh cache: the first decodes and keeps its
    tables, the second (not quiet, --exit-zero) reuses them."""
    base = tmp_path_factory.mktemp("conventions")
    env = _env(base)
    first = _run(["scan", str(SAMPLE), "-q", "--format", "json", "--out", str(base / "findings")], env)
    home = base / "cache" / "txn-audit" / "tables"
    kept = sorted(home.iterdir()) if home.is_dir() else []
    manifest = json.loads((kept[0] / "_ingest.json").read_text()) if kept else {}
    second = _run(["scan", str(SAMPLE), "--format", "json", "--exit-zero"], env)
    manifest2 = json.loads((kept[0] / "_ingest.json").read_text()) if kept else {}
    rule = _run(["scan", str(SAMPLE), "--format", "json", "--rule", "stuck-lso"], env)
    timeout = _run(["scan", str(SAMPLE), "--format", "json", "--max-timeout-ms", "60000"], env)
    return {"base": base, "env": env, "first": first, "second": second, "kept": kept, "rule": rule,
            "timeout": timeout, "run_ids": (manifest.get("run_id"), manifest2.get("run_id"))}


def test_quiet_scan_stderr_has_no_jvm_lines(scans):
    first = scans["first"]
    assert first.returncode == 1, first.stderr[-3000:]  # a finding at or above --fail-on error
    assert json.loads(first.stdout)["findings"]
    assert first.stderr == "", first.stderr  # not a terminal, -q: not one line, the JVM's least of all
    logs = list((scans["base"] / "cache" / "txn-audit" / "logs").glob("spark-*.log"))
    assert logs, "the JVM's output went nowhere"
    assert any(n in log.read_text(errors="replace") for log in logs for n in JVM_NOISE)


def test_scan_keeps_its_tables_and_reuses_them(scans):
    second = scans["second"]
    assert second.returncode == 0, second.stderr[-3000:]  # --exit-zero
    assert json.loads(second.stdout)["findings"]
    assert len(scans["kept"]) == 1 and (scans["kept"][0] / "batches").is_dir()
    a, b = scans["run_ids"]
    assert a and a == b, "the second scan decoded again"
    # the same options: the first scan's findings too, rendered without Spark
    assert "reusing its findings" in second.stderr and "the tables in" in second.stderr
    assert not any(n in second.stderr for n in JVM_NOISE), second.stderr
    first = json.loads(scans["first"].stdout)
    assert json.loads(second.stdout)["findings"] == first["findings"]


def test_a_rescan_with_other_options_reuses_what_they_do_not_change(scans):
    """--rule only chooses among the kept findings (all rules ran); --max-timeout-ms changes
    verdicts: they are decided again from what the first audit collected, without Spark."""
    first = json.loads(scans["first"].stdout)["findings"]
    rule = scans["rule"]
    assert "reusing its findings" in rule.stderr, rule.stderr[-2000:]
    assert json.loads(rule.stdout)["findings"] == [f for f in first if f["rule"] == "stuck-lso"] != []
    timeout = scans["timeout"]
    assert "reusing its findings" not in timeout.stderr, timeout.stderr[-2000:]
    assert "deciding the verdicts again" in timeout.stderr and "(no Spark)" in timeout.stderr, timeout.stderr[-2000:]
    assert not any(n in timeout.stderr for n in JVM_NOISE), timeout.stderr
    assert json.loads(timeout.stdout)["findings"]
    # the report says which transaction.max.timeout.ms it assumed, and where it came from
    assert {k: json.loads(scans["first"].stdout)["summary"][k] for k in ("max_timeout_ms", "max_timeout_source")} == {
        "max_timeout_ms": 900_000, "max_timeout_source": "kafka-default"}
    assert {k: json.loads(timeout.stdout)["summary"][k] for k in ("max_timeout_ms", "max_timeout_source")} == {
        "max_timeout_ms": 60_000, "max_timeout_source": "given"}


def test_report_exit_status(scans):
    findings = scans["base"] / "findings"
    assert CliRunner().invoke(cli, ["report", str(findings), "--format", "json"]).exit_code == 1
    assert CliRunner().invoke(cli, ["report", str(findings), "--format", "json", "--fail-on", "critical",
                                    "--severity", "critical", "--topic", "no-such-topic"]).exit_code == 0
    # `report --format html > r.html` under `set -e`
    proc = subprocess.run(["sh", "-ec", f"{EXE} report {findings} --format html --exit-zero > {scans['base']}/r.html"],
                          capture_output=True, text=True, env=scans["env"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "<html" in (scans["base"] / "r.html").read_text().lower()


def test_failure_names_the_jvm_log(tmp_path):
    """A driver JVM that cannot start: one line saying why (what the JVM said), status 2, no
    traceback; the last stderr line names the run's log, which holds the rest."""
    proc = _run(["scan", str(SAMPLE), "-q", "--no-keep-tables", "--conf", "spark.driver.memory=bogus"],
                _env(tmp_path), timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert ("Error: the Spark driver JVM did not start: Invalid maximum heap size: -Xmxbogus (Could not create "
            "the Java Virtual Machine)") in proc.stderr, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("txn-audit: Spark's and the JVM's log of this run: "), proc.stderr[-2000:]
    log = Path(last.split(": ", 1)[1].split("run: ", 1)[-1])
    assert "Invalid maximum heap size" in log.read_text()


@pytest.mark.parametrize("fail_on, code", [(None, 0), ("critical", 1), ("error", 1)])
def test_batch_fail_on(monkeypatch, tmp_path, fail_on, code):
    """batch: findings are data (status 0) unless --fail-on SEV is given and an open finding reaches it."""
    import auditor.batch.job as job
    import auditor.spark.session as session

    class Result:
        findings = [{"severity": "critical", "rule": "hanging-transaction"}]
        bad_files: list = []

        def summary(self):
            return {"run": 1}

    monkeypatch.setattr(session, "get_spark", lambda *a, **k: None)
    monkeypatch.setattr(job, "run_batch", lambda *a, **k: Result())
    args = ["batch", "--input", str(tmp_path), "--warehouse", str(tmp_path / "wh"), "-q"]
    res = CliRunner().invoke(cli, args + (["--fail-on", fail_on] if fail_on else []))
    assert res.exit_code == code, res.output
    assert json.loads(res.stdout) == {"run": 1}


def test_forensics_given_the_scanned_log_dir_read_its_kept_tables(scans):
    """timeline/coordinator given what the scan read find the tables it kept; a mistyped topic or
    transactional id gets the close names of the dump; an input never scanned says what to run."""
    env = scans["env"]
    tl = _run(["timeline", str(SAMPLE), "--topic", "transfers", "--partition", "0", "--format", "jsonl"], env)
    assert tl.returncode == 0, tl.stderr[-2000:]
    assert f"reading the tables `txn-audit scan {SAMPLE}` kept: {scans['kept'][0]}" in tl.stderr
    assert any(json.loads(x).get("late_write") for x in tl.stdout.splitlines())
    typo = _run(["timeline", str(SAMPLE), "--topic", "tranfers", "--partition", "0"], env)
    assert typo.returncode == 2 and "did you mean 'transfers'?" in typo.stderr, typo.stderr[-2000:]
    coord = _run(["coordinator", str(SAMPLE), "transfer-txn"], env)
    assert "did you mean 'transfers-txn'?" in coord.stderr, coord.stderr[-2000:]
    other = _run(["timeline", str(SAMPLE_LOGS / "clean"), "--topic", "x", "--partition", "0"], env)
    assert other.returncode == 2 and f"run `txn-audit scan {SAMPLE_LOGS / 'clean'}`" in other.stderr


def test_kept_findings_are_bounded(tmp_path):
    """Each --as-of now is a new key: a scheduled scan would pile up findings beside its tables; the
    newest KEEP_FINDINGS stay (and only directories named by a digest are ever removed)."""
    import time as _time

    from auditor.ingest.cache import KEEP_FINDINGS, prune

    home = tmp_path / "_findings"
    for i in range(KEEP_FINDINGS + 3):
        d = home / f"{i:016x}"
        d.mkdir(parents=True)
        os.utime(d, (_time.time() - 1000 + i, _time.time() - 1000 + i))
    (home / "notes").mkdir()
    prune(home, None, keep_newest=KEEP_FINDINGS)
    left = sorted(p.name for p in home.iterdir())
    assert left == sorted([f"{i:016x}" for i in range(3, KEEP_FINDINGS + 3)] + ["notes"])
