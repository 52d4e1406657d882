"""Parts of a broker give the whole broker's verdicts, or say what they lack.

What a user hands over is often one partition directory or a few segment files.
For every capture of ``sample_logs/`` with a finding, each partition directory
holding a finding and the segment holding each finding are scanned alone and
held to the whole capture's findings (:func:`partial_inputs.compare`): the same
rule, kind and severity, or an ``undetermined`` finding naming the missing
evidence; never a warning the whole capture does not raise; never a retention
or loss claim it does not make. A hypothesis test slices a real partition into
contiguous windows of segments; one verdict per transaction holds on every run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SAMPLE_LOGS
from partial_inputs import RANK, compare, disagreements, key, run_all, run_copied, segment_of, table

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def partial(spark, tmp_path_factory):
    return run_all(spark, tmp_path_factory.mktemp("partial"))


def _run(partial, scenario: str, label: str, rel: str):
    _, runs = partial
    path = SAMPLE_LOGS / scenario / rel
    got = [r for r in runs if r.scenario == scenario and r.label == label and r.path == path]
    assert got, f"no {label} run of {path}: {[str(r.path) for r in runs]}"
    return got[0]


def test_every_part_keeps_the_whole_captures_verdicts(partial):
    whole, runs = partial
    assert len(runs) >= 15, table(whole, runs)
    bad = [v for r in runs for v in compare(whole.get(r.scenario, []), r)]
    assert not bad, "\n".join(bad) + "\n\n" + table(whole, runs)


def test_a_partition_dir_without_its_coordinator_is_undetermined_not_harmless(partial):
    """hanging-late-write's transfers-0 alone: the whole log dir says late write (critical); alone
    the input cannot tell in-flight from hanging, and says what would settle it."""
    r = _run(partial, "hanging-late-write", "partition-dir", "broker-1/transfers-0")
    by_rule = {f["rule"]: f for f in r.findings}
    h, s = by_rule["hanging-transaction"], by_rule["stuck-lso"]
    assert (h["kind"], h["severity"]) == ("undetermined", "warning"), h["message"]
    assert "__transaction_state" in h["message"] and "to settle it" in h["message"]
    assert (s["kind"], s["severity"]) == ("undetermined", "warning"), s["message"]


def _verdicts(findings: list[dict]) -> list[tuple]:
    cols = ("rule", "kind", "severity", "topic", "partition", "producer_id", "first_offset", "last_offset")
    return sorted((tuple(f.get(c) for c in cols) for f in findings), key=repr)


def test_a_partition_dir_copied_out_of_its_log_dir_keeps_its_verdicts(spark, partial, tmp_path_factory):
    """Each partition directory holding a finding, copied out of its log dir: no meta.properties
    beside it, so no broker id (and its log dir as its cluster). It must give what it gives in
    place, rule for rule (the rules' joins on the replica key are null-safe: by names, such a
    directory lost its stuck-lso and gained a txnindex-mismatch no-marker)."""
    _, runs = partial
    pairs = run_copied(spark, tmp_path_factory.mktemp("copied"), runs)
    assert len(pairs) >= 10
    bad = []
    for in_place, copy in pairs:
        assert all(f["broker_id"] is None for f in copy.findings)
        if _verdicts(copy.findings) != _verdicts(in_place.findings):
            bad.append(f"{in_place.path.relative_to(SAMPLE_LOGS)}:\n  in place {_verdicts(in_place.findings)}"
                       f"\n  copied   {_verdicts(copy.findings)}")
    assert not bad, "\n".join(bad)


def test_a_middle_segment_claims_no_removal(partial):
    """transfers-0's second segment alone: its producer's earlier batches are in the first segment,
    which was not given: no retention claim, only an info naming the segment left out."""
    r = _run(partial, "hanging-late-write", "segment", "broker-1/transfers-0/00000000000000000014.log")
    gaps = [f for f in r.findings if f["rule"] == "unknown-producer-gap"]
    assert gaps and all(f["kind"] == "earlier-segments-not-given" and f["severity"] == "info" for f in gaps), gaps
    assert "earlier segment" in gaps[0]["message"]


def test_retention_needs_the_log_start_checkpoint(partial):
    """unknown-producer's ledger-0 alone: the whole log dir says retention (its log start and the
    dynamic producer.id.expiration.ms are in the log dir); alone, neither is: undetermined, a warning."""
    whole, _ = partial
    w = [f for f in whole["unknown-producer"] if f["rule"] == "unknown-producer-gap"]
    assert [f["kind"] for f in w] == ["retention"]
    r = _run(partial, "unknown-producer", "partition-dir", "broker-1/ledger-0")
    got = [f for f in r.findings if f["rule"] == "unknown-producer-gap"]
    assert [(f["kind"], f["severity"], f["producer_id"]) for f in got] == [("undetermined", "warning", w[0]["producer_id"])]


def test_one_verdict_per_transaction(partial):
    whole, runs = partial
    every = [*whole.values(), *(r.findings for r in runs)]  # run by run: a part has its own reference instant
    stuck = [f for fs in every for f in fs if f["rule"] == "stuck-lso"]
    assert {f["kind"] for f in stuck} >= {"open", "stuck", "undetermined"}
    assert not [bad for fs in every for bad in disagreements(fs)]


# -- contiguous windows of a real partition -------------------------------------------

WINDOW_PART = SAMPLE_LOGS / "compacted-transactions" / "broker-1" / "kv-0"


def _segments() -> list[Path]:
    return sorted(p for p in WINDOW_PART.glob("*.log") if p.name[:20].isdigit())


@pytest.fixture(scope="module")
def whole_partition(spark, tmp_path_factory):
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    out = tmp_path_factory.mktemp("window-whole") / "t"
    ingest(spark, [str(WINDOW_PART)], str(out))
    return audit(spark, str(out)).findings


@pytest.fixture(scope="module")
def window_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("windows")


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_any_window_of_segments_claims_no_loss_the_whole_does_not(spark, whole_partition, window_dir, data):
    """A contiguous window of kv-0's segments (a compacted transactional partition of a real
    3-broker capture), given as files: no retention or loss claim and no error the whole
    partition directory does not have; a transaction left open by the window is undetermined
    when later segments were left out, never hanging."""
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    segs = _segments()
    assert len(segs) >= 4, f"{WINDOW_PART}: expected a partition of many segments"
    lo = data.draw(st.integers(0, len(segs) - 1), label="first")
    hi = data.draw(st.integers(lo, min(len(segs) - 1, lo + 3)), label="last")
    window = segs[lo:hi + 1]
    out = window_dir / f"w{lo}-{hi}"
    shutil.rmtree(out, ignore_errors=True)
    ingest(spark, [str(p) for p in window], str(out))
    found = audit(spark, str(out)).findings
    whole = {key(f): f for f in whole_partition}
    for f in found:
        if f["rule"] == "unknown-producer-gap":
            assert f["kind"] not in ("retention", "unexplained") or whole.get(key(f), {}).get("kind") == f["kind"], f["message"]
        if RANK[f["severity"]] >= RANK["error"]:
            assert key(f) in whole, f["message"]
        if f["rule"] == "hanging-transaction" and hi < len(segs) - 1:
            assert f["kind"] == "undetermined", f["message"]
        if f["rule"] == "unknown-producer-gap" and lo > 0:
            assert f["kind"] == "earlier-segments-not-given", f["message"]
    assert not disagreements(found)


def test_not_given_counts_the_directory_segments_left_out(tmp_path):
    """auditor.ingest.not_given: the live segments of a directory whose files were given one by one,
    before, between and after the given ones (names only; nothing is read)."""
    from auditor.ingest.not_given import not_given
    from auditor.ingest.discovery import discover

    d = tmp_path / "ld" / "t-0"
    d.mkdir(parents=True)
    for base in (0, 10, 20, 30, 40):
        (d / f"{base:020d}.log").write_bytes(b"")
    (d / f"{50:020d}.log.deleted").write_bytes(b"")  # not live: not counted
    given = [str(d / f"{10:020d}.log"), str(d / f"{30:020d}.log")]
    rows = not_given(list(discover(given)))
    assert rows == [{"log_dir": str(tmp_path / "ld"), "topic": "t", "partition": 0, "dir": str(d), "segments_in_dir": 5,
                     "segments_given": 2, "before": 1, "after": 1, "between": 1, "first_given_offset": 10,
                     "next_not_given_offset": 40, "gap_from_offset": 20, "gap_to_offset": 30}]
    assert not_given(list(discover([str(d)]))) == []  # the directory given whole
    assert segment_of(d, 25) == d / f"{20:020d}.log"


def test_segments_left_out_between_explain_sequence_gaps(spark, tmp_path):
    """The first and third segments of a clean capture's partition, without the second: producers
    writing across the one left out skip sequences in the input, not in the log."""
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    segs = sorted((SAMPLE_LOGS / "clean" / "broker-1" / "orders-0").glob("*.log"))
    assert len(segs) >= 3
    out = tmp_path / "t"
    ingest(spark, [str(segs[0]), str(segs[2])], str(out))
    found = audit(spark, str(out)).findings
    from auditor.engine.context import AuditContext

    ctx = AuditContext(spark, str(out))
    try:  # the input does skip sequences across the segment left out (so the test can fail)
        across = ctx.sequence_breaks.where(
            f"prev_data_epoch = producer_epoch AND prev_data_offset < {int(segs[2].name[:20])} AND base_sequence > "
            "prev_data_last_sequence + 1").count()
    finally:
        ctx.close()
    assert across > 0
    assert not [f["message"] for f in found if f["rule"] == "out-of-order-sequence"]
    assert not [f["message"] for f in found if RANK[f["severity"]] >= RANK["error"]]


def test_a_segment_listed_but_unreadable_explains_sequence_gaps_across_it(spark, tmp_path):
    """A log dir whose middle segment is listed but cannot be read (here a broken link; on a running
    broker, retention deleting it between the listing and the read): producers writing across it skip
    sequences in what was read, not in the log -- counted as a segment left out between the read ones
    (auditor.model.coverage._with_unread_segments), so no out-of-order-sequence finding."""
    import os
    import shutil

    from auditor.engine.context import AuditContext
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    src = SAMPLE_LOGS / "clean" / "broker-1"
    ld = tmp_path / "ld"
    part = ld / "orders-0"
    shutil.copytree(src / "orders-0", part)
    shutil.copy(src / "meta.properties", ld / "meta.properties")
    segs = sorted(part.glob("*.log"))
    assert len(segs) >= 3
    segs[1].unlink()
    os.symlink(str(tmp_path / "gone.log"), str(segs[1]))
    out = tmp_path / "t"
    ingest(spark, [str(ld)], str(out))
    ctx = AuditContext(spark, str(out))
    try:  # what was read does skip sequences across the unreadable segment (so the test can fail)
        across = ctx.sequence_breaks.where(
            f"prev_data_epoch = producer_epoch AND prev_data_offset < {int(segs[2].name[:20])} AND base_sequence > "
            "prev_data_last_sequence + 1").count()
        row = ctx.partitions.where("topic = 'orders'").first()
    finally:
        ctx.close()
    assert across > 0
    assert (row["segments_not_given_between"], row["gap_from_offset"], row["gap_to_offset"]) == (
        1, int(segs[1].name[:20]), int(segs[2].name[:20]))
    found = audit(spark, str(out)).findings
    assert not [f["message"] for f in found if f["rule"] == "out-of-order-sequence"]


def test_segments_given_without_their_partition_directory_are_not_replayed_as_one_log(spark, tmp_path):
    """Two partitions' first segments handed over side by side under names of the user's own (a
    ticket's attachments): which partition each holds is unknown, and each is a replica of its own
    (auditor.ingest.plan). Replayed as one log they interleaved two partitions' offsets: a marker
    whose data was in the other file counted as marker-only, one transaction too few committed."""
    import shutil

    from auditor.engine.context import AuditContext
    from auditor.ingest.spark_job import ingest

    def transactions(inputs: list[str], name: str) -> tuple[int, dict]:
        out = tmp_path / name
        ingest(spark, inputs, str(out))
        ctx = AuditContext(spark, str(out))
        try:
            states = {r["state"]: r["count"] for r in ctx.transactions.groupBy("state").count().collect()}
            return ctx.partitions.count(), states
        finally:
            ctx.close()

    src = SAMPLE_LOGS / "clean" / "broker-1"
    firsts = [src / f"orders-{p}" / "00000000000000000000.log" for p in (0, 1)]
    in_place = transactions([str(f) for f in firsts], "in-place")
    alone = tmp_path / "attachments"
    alone.mkdir()
    for p, f in enumerate(firsts):
        shutil.copy(f, alone / f"orders{p}.log")
    assert in_place[0] == 2
    assert transactions([str(alone / "orders0.log"), str(alone / "orders1.log")], "alone") == in_place


def test_a_segment_given_alone_never_makes_an_open_transaction_hanging(spark, tmp_path):
    """A segment copied out of its partition directory, holding a transaction with no marker in it,
    judged long after: the marker may be in a later segment, which the input cannot show --
    undetermined (warning), where the same segment in its directory (the last one there) is hanging."""
    import shutil

    from auditor.engine.context import AuditOptions
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    seg = SAMPLE_LOGS / "hanging-late-write" / "broker-1" / "transfers-0" / "00000000000000000014.log"
    later = AuditOptions(as_of_ms=1_900_000_000_000)  # 2030: older than any transaction timeout

    def verdicts(path: Path, name: str) -> list[tuple]:
        out = tmp_path / name
        ingest(spark, [str(path)], str(out))
        return sorted((f["kind"], f["severity"]) for f in audit(spark, str(out), options=later).findings
                      if f["rule"] == "hanging-transaction")

    assert ("overdue", "error") in verdicts(seg, "in-place")  # old, and no coordinator record given
    copy = tmp_path / "copy" / "segment.log"
    copy.parent.mkdir()
    shutil.copy(seg, copy)
    assert verdicts(copy, "alone") == [("undetermined", "warning")]


def test_overlapping_inputs_read_each_file_once(spark, tmp_path):
    """A log dir given together with a partition directory inside it (in either order), with a
    symbolic link to itself, or with one of its segments: every file is read once. Read twice, the
    partition's batches were two copies of one log -- its hanging transaction was lost and a
    txnindex-mismatch reported instead, or the log dir counted as a second broker."""
    import os

    from auditor.ingest.spark_job import ingest

    ld = SAMPLE_LOGS / "hanging-late-write" / "broker-1"
    link = tmp_path / "link-to-broker-1"
    os.symlink(ld, link)
    seg = next(iter(sorted((ld / "transfers-0").glob("*.log"))))

    def run(inputs: list, name: str) -> tuple:
        out = tmp_path / name
        ingest(spark, [str(i) for i in inputs], str(out))
        found = sorted((f["rule"], f["kind"], f["severity"], f["topic"], f["partition"], f["producer_id"],
                        f["first_offset"], f["broker_id"], f["log_dir"]) for f in _audit_only(spark, out))
        files = spark.read.parquet(str(out / "files")).where("kind = 'segment'").select("path").collect()
        return found, sorted(r["path"] for r in files), spark.read.parquet(str(out / "batches")).count()

    alone = run([ld], "alone")
    assert any(f[0] == "hanging-transaction" and f[2] == "critical" for f in alone[0]), alone[0]
    for name, inputs in (("dir-then-partition", [ld, ld / "transfers-0"]), ("partition-then-dir", [ld / "transfers-0", ld]),
                         ("link", [ld, link]), ("segment-too", [ld, seg])):
        assert run(inputs, name) == alone, name


def _audit_only(spark, tables):
    from auditor.engine.runner import audit

    return audit(spark, str(tables)).findings


def test_a_partition_directory_under_a_name_of_the_users_own_is_one_replica(spark, tmp_path):
    """orders-0 copied as ``orders-0.bak``: not a partition directory's name, so its partition is not
    known, but Kafka keeps one partition per directory -- its segments, indexes and snapshots are one
    replica, keyed by the directory (auditor.ingest.plan). The same transactions as in place, and no
    warning the directory in place does not give (its .txnindex entries were once judged against no
    marker at all: three txnindex-mismatch warnings)."""
    import shutil

    from auditor.engine.context import AuditContext
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    def run(path: Path, name: str) -> tuple:
        out = tmp_path / name
        ingest(spark, [str(path)], str(out))
        found = {(f["rule"], f["kind"]) for f in audit(spark, str(out)).findings if RANK[f["severity"]] >= 1}
        ctx = AuditContext(spark, str(out))
        try:
            states = {r["state"]: r["count"] for r in ctx.transactions.groupBy("state").count().collect()}
            return found, states, ctx.partitions.count()
        finally:
            ctx.close()

    src = SAMPLE_LOGS / "clean" / "broker-1" / "orders-0"
    copy = tmp_path / "copies" / "orders-0.bak"
    shutil.copytree(src, copy)
    in_place, renamed = run(src, "in-place"), run(copy.parent, "renamed")
    assert renamed[2] == 1 and renamed[1] == in_place[1], (renamed, in_place)
    assert renamed[0] <= in_place[0], renamed[0] - in_place[0]
