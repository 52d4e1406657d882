"""``--as-of``: epoch ms, ``now`` or ISO-8601, parsed by one click type (auditor/cli/audit_cmd.py)."""

from __future__ import annotations

import json
import time

import click
import pytest
from click.testing import CliRunner

from conftest import SAMPLE_LOGS
from auditor.cli.audit_cmd import AsOf, parse_as_of
from auditor.cli.main import cli

T = 1_795_629_600_000  # 2026-11-25T18:00:00Z


@pytest.mark.parametrize("text, ms", [
    ("1795629600000", T),
    ("2026-11-25T18:00:00Z", T),
    ("2026-11-25T18:00:00z", T),
    ("2026-11-25T18:00:00+00:00", T),
    ("2026-11-25T18:00:00+01:00", T - 3_600_000),
    ("2026-11-25T13:00:00-05:00", T),
    ("2026-11-25T18:00:00", T),  # naive: UTC
    ("2026-11-25 18:00", T),
    ("2026-11-25", T - 18 * 3_600_000),  # midnight UTC
    ("2026-11-25T18:00:00.001Z", T + 1),
    ("2026-11-25T18:00:00.999Z", T + 999),  # integer arithmetic: not a millisecond short
    (" 2026-11-25T18:00:00Z ", T),
])
def test_epoch_ms_and_iso_8601(text, ms):
    assert parse_as_of(text) == ms


@pytest.mark.parametrize("text, message", [
    # `date +%s` prints seconds: taken as ms they are 1970; the message gives the value to use
    ("1795324884", r"'1795324884' is 1970-01-21T.* as epoch ms, before 2000; it looks like epoch seconds: use "
                   r"1795324884000 \(2026-11-22T"),
    ("0", r"'0' is 1970-01-01T00:00:00.000Z as epoch ms, before 2000$"),
    ("1999-12-31T23:59:59Z", "before 2000"),
    ("2031-01-01", r"more than a day after this machine's clock .*; for the present use 'now'"),
])
def test_instants_no_audit_means_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_as_of(text, now_ms=T)


def test_a_day_of_clock_drift_is_accepted():
    assert parse_as_of(str(T + 86_400_000), now_ms=T) == T + 86_400_000
    assert parse_as_of("946684800000", now_ms=T) == 946_684_800_000  # 2000-01-01 itself


def test_now_is_the_wall_clock():
    before = time.time_ns() // 1_000_000
    got = parse_as_of("now")
    after = time.time_ns() // 1_000_000
    assert before <= got <= after
    assert parse_as_of("NOW", now_ms=42) == 42 == parse_as_of("now", now_ms=42)


@pytest.mark.parametrize("text", ["yesterday", "", "now-1h", "2026-13-01", "2026-11-25T25:00:00Z", "18:00:00", "1.5e12",
                                  "12ms"])
def test_anything_else_is_refused(text):
    with pytest.raises(ValueError, match=r"expected epoch ms, 'now' or ISO-8601 \(2026-11-25T18:00:00Z\), got "):
        parse_as_of(text)


def test_click_type():
    t = AsOf()
    assert t.convert("2026-11-25T18:00:00Z", None, None) == T and t.convert(T, None, None) == T
    with pytest.raises(click.BadParameter, match="got 'yesterday'"):
        t.convert("yesterday", None, None)


@pytest.mark.parametrize("cmd", ["scan", "audit"])
def test_bad_value_is_a_usage_error(cmd, tmp_path):
    res = CliRunner().invoke(cli, [cmd, str(tmp_path), "--as-of", "yesterday"])
    assert res.exit_code == 2
    assert "--as-of" in res.output
    assert "expected epoch ms, 'now' or ISO-8601 (2026-11-25T18:00:00Z), got 'yesterday'" in res.output


def test_help_names_the_forms():
    res = CliRunner().invoke(cli, ["scan", "--help"])
    assert res.exit_code == 0 and "'now'" in res.output and "ISO-8601" in res.output


@pytest.mark.spark
def test_scan_as_of_now(spark, tmp_path):
    before = time.time_ns() // 1_000_000
    res = CliRunner().invoke(cli, ["scan", str(SAMPLE_LOGS / "hanging-late-write"), "--tables", str(tmp_path / "t"),
                                   "--as-of", "now", "--rule", "hanging-transaction", "--format", "json", "--quiet"])
    after = time.time_ns() // 1_000_000
    assert res.exit_code in (0, 1), res.output
    data = json.loads(res.stdout)
    assert before <= data["summary"]["as_of_ms"] <= after
    # ages are measured against it: the open transaction is older than the time since its first batch
    hang = [f for f in data["findings"] if f["rule"] == "hanging-transaction"]
    assert hang and all(f["duration_ms"] >= before - f["first_timestamp"] for f in hang)
