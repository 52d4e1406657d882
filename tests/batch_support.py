"""Helpers for the batch-job tests: a small broker log dir that changes between
runs, and table contents in a comparable form."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from builders import data_batch, marker

T0 = 1_700_000_000_000
HOUR = 3_600_000
CLUSTER = "batch-test-cluster"


def write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def seg(d: Path, base: int) -> Path:
    return d / f"{base:020d}.log"


def build_v1(root: Path) -> Path:
    """One KRaft broker log dir (node 1):

    * ``orders-0``: a rolled segment (committed transaction of pid 7, a plain batch)
      and the active segment: an open transaction of pid 9 at offset 4, then a plain
      batch two hours later (so pid 9's transaction is old: hanging);
    * ``orders-1``: three plain records (deleted by "retention" in v2);
    * ``orders-3``: an open transaction of pid 11 that stays open;
    * a ``replication-offset-checkpoint`` at the log dir root.
    """
    log = root / "broker-1"
    write(log / "meta.properties", f"version=1\nnode.id=1\ncluster.id={CLUSTER}\n".encode())
    write(log / "replication-offset-checkpoint", b"0\n2\norders 0 7\norders 3 1\n")
    o0 = log / "orders-0"
    write(seg(o0, 0), data_batch(0, 2, producer_id=7, producer_epoch=0, base_sequence=0, transactional=True, timestamp=T0)
          + marker(2, 7, 0, commit=True, timestamp=T0 + 10) + data_batch(3, 1, timestamp=T0 + 20))
    write(seg(o0, 4), data_batch(4, 2, producer_id=9, producer_epoch=0, base_sequence=0, transactional=True,
                                 timestamp=T0 + 100) + data_batch(6, 1, timestamp=T0 + 2 * HOUR))
    write(seg(log / "orders-1", 0), data_batch(0, 3, timestamp=T0 + 30))
    write(seg(log / "orders-3", 0), data_batch(0, 1, producer_id=11, producer_epoch=0, base_sequence=0,
                                               transactional=True, timestamp=T0 + 50))
    return log


def mutate_to_v2(log: Path) -> dict[str, str]:
    """What happens between two scheduled runs:

    * the active segment of ``orders-0`` grows: pid 9's transaction is aborted (its finding resolves);
    * ``orders-0`` rolls a new segment at offset 8;
    * retention deletes ``orders-1``'s only segment;
    * a new partition ``orders-2`` gets a young open transaction (pid 13);
    * the checkpoint is rewritten with the same size and mtime (only its content tells).
    """
    o0 = log / "orders-0"
    with open(seg(o0, 4), "ab") as f:
        f.write(marker(7, 9, 0, commit=False, timestamp=T0 + 2 * HOUR + 1))
    write(seg(o0, 8), data_batch(8, 1, timestamp=T0 + 2 * HOUR + 2))
    os.unlink(seg(log / "orders-1", 0))
    write(seg(log / "orders-2", 0), data_batch(0, 2, producer_id=13, producer_epoch=0, base_sequence=0,
                                               transactional=True, timestamp=T0 + 2 * HOUR))
    cp = log / "replication-offset-checkpoint"
    st = cp.stat()
    cp.write_bytes(b"0\n2\norders 0 9\norders 3 1\n")
    os.utime(cp, ns=(st.st_atime_ns, st.st_mtime_ns))
    return {"grown": str(seg(o0, 4)), "new": str(seg(o0, 8)), "gone": str(seg(log / "orders-1", 0)),
            "new_partition": str(seg(log / "orders-2", 0)), "checkpoint": str(cp), "rolled": str(seg(o0, 0)),
            "untouched": str(seg(log / "orders-3", 0))}


def canon(v):
    """A hashable, order-independent form of a Spark or pyarrow value."""
    if hasattr(v, "asDict"):
        v = v.asDict(recursive=True)
    if isinstance(v, dict):
        return tuple(sorted((k, canon(x)) for k, x in v.items()))
    if isinstance(v, (list, tuple)):
        return tuple(canon(x) for x in v)
    if isinstance(v, bytearray):
        return bytes(v)
    return v


def delta_rows(spark, uri: str, drop: tuple[str, ...] = ()) -> list:
    df = spark.read.format("delta").load(uri)
    keep = [c for c in df.columns if c not in drop]
    return sorted((canon(r) for r in df.select(*keep).collect()), key=repr)


def decoder_rows(inputs: list[str]) -> dict[str, list]:
    """Every table's rows as the decoders produce them for ``inputs`` (no Spark):
    what one complete ingest of the current files holds."""
    from auditor.ingest.plan import make_plan
    from auditor.ingest.tables import TABLES, iter_rows

    plan = make_plan(inputs)
    out = {}
    for name, spec in TABLES.items():
        rows = [r for t in plan.tasks if spec.accepts(t) for r in iter_rows(spec, t) if r.get("_problem_kind") is None]
        rows = [{k: v for k, v in r.items() if not k.startswith("_problem_")} for r in rows]
        table = pa.Table.from_pylist(rows, schema=spec.schema)
        out[name] = sorted((canon(r) for r in table.to_pylist()), key=repr)
    return out
