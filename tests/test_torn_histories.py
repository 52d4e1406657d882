"""torn-transaction over generated histories (hypothesis): silent on every healthy one, and finds
every tear planted in one.

A history is one transactional id's transactions back to back (transaction.version 0/1: one
producer epoch for all; 2: an epoch bumped at every EndTxn), on one to three partitions, written
the way Kafka writes them (``auditor.model.decisions.decision_markers`` says why that fixes the
markers' order and times): data while the transaction is open, ``Prepare*``, the markers, then
``Complete*``, after which the next transaction starts -- mostly all in one millisecond, as on one
busy broker. Every partition leader's clock and the producer's are skewed against the
coordinator's, both ways, within :data:`auditor.model.decisions.CLOCK_SKEW_MS`; a partition may be
listed without data (it still gets its marker); under 0/1 a coordinator may fail over, its
successor resending the markers (duplicates, a higher coordinator epoch). A torn copy of a history
loses one completed transaction's markers on one partition, or gets them of the other type.

Each example puts many histories in one table set, each in a cluster of its own, and audits them
once: one Spark job per example, a handful of examples.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.engine.context import AuditOptions
from auditor.engine.runner import audit
from auditor.model.decisions import CLOCK_SKEW_MS
from tables_builder import T0, TableSet

pytestmark = pytest.mark.spark

TOPIC = "h"
PID = 900


@dataclass
class Txn:
    """One transaction as the coordinator and the partitions record it (times in ms after T0, in the
    coordinator's clock; ``markers``: partition -> real append times of its markers, the first the
    coordinator's, a second one its successor's resend)."""

    commit: bool
    listed: list[int]
    written: dict[int, int]  # partition -> real time of its data (listed partitions the producer wrote)
    start: int
    prepare: int
    queued: int  # Complete*'s last update time: when the markers were queued
    appended: int  # Complete*'s append time: once every marker was written
    markers: dict[int, list[int]] = field(default_factory=dict)
    failover: bool = False


@dataclass
class History:
    tv: int
    record_version: bool  # the coordinator's records state the transaction version (else: the epoch bump shows it)
    leader_skew: list[int]
    producer_skew: int
    txns: list[Txn]


def _build(rng: random.Random, tv: int, n: int, parts: int, record_version: bool) -> History:
    """A healthy history: the times follow the protocol's order, mostly within one millisecond."""
    step = lambda: rng.choice((0, 0, 0, 0, 1, 2, 7))  # noqa: E731
    skew = lambda: rng.randint(-CLOCK_SKEW_MS, CLOCK_SKEW_MS)  # noqa: E731
    txns, now = [], rng.randint(0, 3)
    for _ in range(n):
        listed = sorted(rng.sample(range(parts), rng.randint(1, parts)))
        start = now
        written = {p: start + step() for p in listed if rng.random() < 0.75}
        prepare = max([start, *written.values()]) + step()
        failover = tv == 1 and rng.random() < 0.15
        queued = prepare + step() + (rng.randint(100, 3000) if failover else 0)
        markers: dict[int, list[int]] = {}
        t = queued
        for p in listed:
            if failover:  # the first coordinator's marker (maybe), then its successor's resend
                first = [prepare + step()] if rng.random() < 0.7 else []
                t = t + step()
                markers[p] = [*first, t]
            else:
                t = t + step()
                markers[p] = [t]
        appended = t + step()
        txns.append(Txn(rng.random() < 0.6, listed, written, start, prepare, queued, appended, markers, failover))
        now = appended + step()
    return History(tv, record_version, [skew() for _ in range(parts)], skew(), txns)


@st.composite
def histories(draw) -> History:
    """A healthy history: its shape drawn by hypothesis, its times from a drawn seed."""
    tv = draw(st.sampled_from((1, 2)))
    n = draw(st.integers(2, 9))
    parts = draw(st.integers(1, 3))
    record_version = draw(st.booleans())
    return _build(random.Random(draw(st.integers(0, 2**32))), tv, n, parts, record_version)


@dataclass
class Tear:
    """One planted tear: transaction ``txn``'s markers on ``partition`` left out or of the other type."""

    txn: int
    partition: int
    kind: str  # "missing" or "flip"


def _tear(rng: random.Random, h: History) -> Tear | None:
    """Where to plant a tear: a transaction and a listed partition with no resent marker there (a
    duplicate of a neighbour's type could stand in for a missing one: that log is healthy-looking)."""
    if any(t.failover for t in h.txns):
        return None
    i = rng.randrange(len(h.txns))
    return Tear(i, rng.choice(h.txns[i].listed), rng.choice(("missing", "flip")))


def _write(t: TableSet, h: History, tear: Tear | None) -> None:
    """``h``'s rows into ``t`` (its current cluster): the coordinator's records, then each partition's log."""
    epoch = 3
    logs: dict[int, list[tuple]] = {p: [] for p in range(len(h.leader_skew))}
    coordinator_epoch, offset = 1, 0
    for i, x in enumerate(h.txns):
        data_epoch, marker_epoch = (epoch + i, epoch + i + 1) if h.tv == 2 else (epoch, epoch)
        ctv = 2 if h.tv == 2 and h.record_version else None
        end = "Commit" if x.commit else "Abort"
        tps = [[TOPIC, p] for p in x.listed]
        for state, e, parts, updated in (("Ongoing", data_epoch, tps, x.start), (f"Prepare{end}", marker_epoch, tps, x.prepare),
                                         (f"Complete{end}", marker_epoch, [], x.queued)):
            t.txn("hist", offset, state, PID, e, partitions=parts, start_ms=T0 + x.start, updated_ms=T0 + updated,
                  txn_partition=7, client_transaction_version=ctv)
            offset += 1
        t.rows["transaction_log"][-1]["timestamp"] = T0 + x.appended  # Complete*: appended after the markers
        for p, when in x.written.items():
            logs[p].append((when, "data", data_epoch, None, None))
        coordinator_epoch += x.failover
        for p, times in x.markers.items():
            if tear is not None and (tear.txn, tear.partition) == (i, p):
                if tear.kind == "missing":
                    continue
                commit = not x.commit
            else:
                commit = x.commit
            for k, when in enumerate(times):
                ce = coordinator_epoch - (1 if x.failover and k + 1 < len(times) else 0)
                logs[p].append((when, "marker", marker_epoch, commit, ce))
    last = h.txns[-1].appended
    for p, events in logs.items():  # appended in real-time order; stamped with the leader's or the producer's clock
        seq = 0
        for o, (when, what, e, commit, ce) in enumerate(events):
            if what == "data":
                t.batch(TOPIC, p, o, producer_id=PID, producer_epoch=e, base_sequence=seq if h.tv == 1 else 0,
                        transactional=True, ts=T0 + when + h.producer_skew)
                seq += 1
            else:
                t.marker(TOPIC, p, o, PID, e, commit=commit, coordinator_epoch=ce, ts=T0 + when + h.leader_skew[p])
        t.batch(TOPIC, p, len(events), ts=T0 + last + 5000)  # the log goes on past every decision


def _audit(spark, root, cases: dict[str, tuple[History, Tear | None]]) -> dict[str, list[dict]]:
    t = TableSet(root)
    for cluster, (h, tear) in cases.items():
        t.cluster = cluster
        _write(t, h, tear)
    t.write()
    out: dict[str, list[dict]] = {c: [] for c in cases}
    for f in audit(spark, str(root), options=AuditOptions(), only=["torn-transaction"]).findings:
        out[f["cluster_id"]].append(f)
    return out


@settings(max_examples=2, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(many=st.lists(st.tuples(histories(), st.integers(0, 2**32)), min_size=30, max_size=30))
def test_healthy_histories_are_silent_and_tears_are_found(spark, tmp_path_factory, many):
    cases: dict[str, tuple[History, Tear | None]] = {}
    for k, (h, seed) in enumerate(many):
        cases[f"healthy-{k}"] = (h, None)
        tear = _tear(random.Random(seed), h)
        if tear is not None:
            cases[f"torn-{k}"] = (h, tear)
    found = _audit(spark, tmp_path_factory.mktemp("histories") / "tables", cases)
    for cluster, (h, tear) in cases.items():
        got = found[cluster]
        if tear is None:
            assert got == [], (cluster, h, [f["message"] for f in got])
            continue
        decided = "COMMIT" if h.txns[tear.txn].commit else "ABORT"
        kinds = {f"missing-{decided.lower()}-marker"} | ({"wrong-marker"} if tear.kind == "flip" else set())
        # of the same type in the same millisecond, the count may name a neighbour: the partition and the
        # kind are the tear's
        assert got, (cluster, tear, h)
        assert {(f["topic"], f["partition"]) for f in got} == {(TOPIC, tear.partition)}, (cluster, tear, h, got)
        assert {f["kind"] for f in got} <= kinds, (cluster, tear, h, [f["message"] for f in got])
