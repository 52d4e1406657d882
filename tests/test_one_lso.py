"""One fact, one place: every reader's last stable offset is the producer-state model's.

The timeline's replay, the HTML partition card and the audit's ``last_stable_offsets``
view each show an LSO; none may compute its own. Here they are held equal on a
captured scenario whose LSO is pinned (a late write after an abort,
``sample_logs/hanging-late-write``): the replay's ``end`` event against
:func:`auditor.model.producer_state.reference.load_replica` on the same batches and high
watermark, and the HTML card against the Spark model's value for the replica.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from conftest import SAMPLE_LOGS
from auditor.cli.main import cli

pytestmark = pytest.mark.spark

SCENARIO = SAMPLE_LOGS / "hanging-late-write"
EXPECTED = json.loads((SCENARIO / "expected.json").read_text())
TOPIC, PARTITION = "transfers", 0
ENDS = EXPECTED["expect"]["end_offsets_before_shutdown"][f"{TOPIC}-{PARTITION}"]
BATCH_COLUMNS = ["base_offset", "last_offset", "producer_id", "producer_epoch", "base_sequence", "last_sequence",
                 "record_count", "is_transactional", "is_control", "control_type", "coordinator_epoch", "max_timestamp"]


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory):
    from auditor.ingest.spark_job import ingest

    out = tmp_path_factory.mktemp("one-lso") / "tables"
    ingest(spark, [str(SCENARIO)], str(out))
    return out


@pytest.fixture(scope="module")
def replica(spark, tables):
    """broker-1's transfers-0: its live batches in offset order, and the model's
    ``last_stable_offsets`` row for it (``AuditContext``, as the audit builds it)."""
    from pyspark.sql import functions as F

    from auditor.engine.context import AuditContext

    ctx = AuditContext(spark, str(tables))
    try:
        mine = (F.col("topic") == TOPIC) & (F.col("partition") == PARTITION)
        batches = [r.asDict() for r in ctx.table("batches").where(mine & (F.col("source") == "segment"))
                   .select(*BATCH_COLUMNS).orderBy("base_offset").collect()]
        rows = ctx.last_stable_offsets.where(mine).collect()
        assert len(rows) == 1, rows  # one broker, one log dir
        model = rows[0].asDict()
    finally:
        ctx.close()
    return batches, model


def test_replay_end_lso_is_the_reference_models(tables, replica):
    from auditor.forensics.replay import Replay, ReplayOptions
    from auditor.model.producer_state.reference import load_replica
    from auditor.model.replica import high_watermark_of

    batches, model = replica
    loaded = load_replica(batches, log_start_offset=model["log_start_offset"], log_end_offset=model["log_end_offset"],
                          high_watermark=model["high_watermark"])
    assert loaded.last_stable_offset < loaded.high_watermark  # pinned: the case worth checking
    assert (loaded.last_stable_offset, loaded.high_watermark) == (ENDS["last_stable_offset"], ENDS["high_watermark"])

    # the CLI's timeline (Spark selects and streams the rows, the replay consumes them)
    res = CliRunner().invoke(cli, ["timeline", str(tables), "--topic", TOPIC, "--partition", str(PARTITION),
                                   "--format", "jsonl"])
    assert res.exit_code == 0, res.output
    events = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    end = events[-1]
    assert end["event"] == "end"
    assert (end["lso"], end["high_watermark"], end["log_end"]) == (
        loaded.last_stable_offset, model["hw"], model["log_end_offset"])
    assert f"LSO {loaded.last_stable_offset}" in end["detail"]

    # the replay on the same batches directly, with the log start too
    opts = ReplayOptions(topic=TOPIC, partition=PARTITION, end_offset=model["log_end_offset"],
                         high_watermark=high_watermark_of(model["high_watermark"], model["log_end_offset"]),
                         log_start_offset=model["log_start_offset"])
    direct = list(Replay(opts).run(batches))
    assert direct[-1]["lso"] == loaded.last_stable_offset == model["last_stable_offset"]
    # on the way, the LSO is the model's with the log end standing for the high watermark
    for ev in direct[:-1]:
        if ev["event"] in ("data", "marker", "lso"):
            assert ev["lso"] is not None and ev["lso"] <= ev["log_end"], ev


def test_replay_without_a_high_watermark_uses_the_log_end(replica):
    """No checkpoint: the log end is the high watermark (the model's rule); a checkpoint
    above the log end is capped by it."""
    from auditor.forensics.replay import Replay, ReplayOptions
    from auditor.model.producer_state.reference import load_replica
    from auditor.model.replica import high_watermark_of

    batches, model = replica
    leo = model["log_end_offset"]
    for hw in (None, leo + 5):
        end = list(Replay(ReplayOptions(end_offset=leo, high_watermark=high_watermark_of(hw, leo))).run(batches))[-1]
        assert end["lso"] == load_replica(batches, log_start_offset=0, log_end_offset=leo,
                                          high_watermark=hw).last_stable_offset, hw


def test_replica_bounds_are_the_reference_rules(replica):
    """The Spark model's log start and high watermark follow the rules of the reference
    model (``reference.log_start_offset``, ``reference.effective_high_watermark``)."""
    from auditor.model.producer_state.reference import effective_high_watermark, log_start_offset

    _, model = replica
    assert model["log_start_offset"] == log_start_offset(model["checkpoint_log_start_offset"],
                                                         model["first_segment_base_offset"])
    assert model["hw"] == effective_high_watermark(model["high_watermark"], model["log_end_offset"])


def test_html_card_prints_the_models_lso(spark, tables, replica, tmp_path):
    _, model = replica
    assert model["last_stable_offset"] < model["hw"]  # pinned
    findings = tmp_path / "findings"
    res = CliRunner().invoke(cli, ["audit", str(tables), "--out", str(findings), "--rule", "stuck-lso",
                                   "--rule", "hanging-transaction", "--quiet", "--format", "json"])
    assert res.exit_code in (0, 1), res.output
    plots = json.loads((findings / "_plots.json").read_text())
    assert plots["version"] == 2
    part = next(p for p in plots["partitions"] if (p["topic"], p["partition"]) == (TOPIC, PARTITION))
    assert (part["last_stable_offset"], part["first_unstable_offset"], part["high_watermark"]) == (
        model["last_stable_offset"], model["first_unstable_offset"], model["hw"])

    html = CliRunner().invoke(cli, ["report", str(findings), "--format", "html"])
    assert html.exit_code in (0, 1), html.output
    cards = re.findall(r'<article class="partition"><h3>([^<]*)</h3>(.*?)</article>', html.stdout, re.S)
    card = dict(cards)[f"{TOPIC}-{PARTITION}"]
    assert re.findall(r'<span class="lso-now">LSO (\d+)</span>', card) == [str(model["last_stable_offset"])]
    assert f"high watermark {model['hw']}" in card
    # the chart's series still ends where the model is (a different, time-bucketed quantity)
    assert part["lso_lag"][-1]["lso"] == model["last_stable_offset"]
    # the open transaction's bar carries the model's verdict and age: what hanging-transaction reports
    found = json.loads(res.stdout)["findings"]
    h = next(f for f in found if f["rule"] == "hanging-transaction" and f["topic"] == TOPIC)
    open_sessions = [s for s in part["sessions"] if s["state"] == "open"]
    assert [(s["verdict"], s["age_ms"]) for s in open_sessions] == [(h["kind"], h["duration_ms"])]
    assert f"no marker: {h['kind']}, open for" in card
