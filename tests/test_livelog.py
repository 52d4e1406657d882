"""The live log (auditor/model/livelog.py): one case per rule of Kafka's LogLoader.

The broker-oracle test checks the result against Kafka's own loader on every real
partition directory we have; these cases cover the files those directories
rarely hold (interrupted swaps and splits, recovery truncation, overlaps).
"""

from __future__ import annotations

from auditor.model.livelog import decide, recovery_points

LOG_DIR = "/data"
PDIR = f"{LOG_DIR}/orders-0"


def f(name: str, *, kind: str = "segment", status: str = "ok", error_position=None, next_offset=None,
      dir_status: str = "live", pdir: str = PDIR) -> dict:
    """An inventory row for ``name`` in the partition directory."""
    base, _, rest = name.partition(".")
    suffix = rest.split(".")[-1] if rest.count(".") else "live"
    return {"path": f"{pdir}/{name}", "log_dir": LOG_DIR, "topic": "orders", "partition": 0, "dir_status": dir_status,
            "kind": kind, "file_status": suffix, "base_offset": int(base) if base.isdigit() else None,
            "status": status, "error_position": error_position, "next_offset": next_offset}


def seg(offset: int, suffix: str = "", **kw) -> dict:
    return f(f"{offset:020d}.log{suffix}", **kw)


CLEAN = {"path": f"{LOG_DIR}/.kafka_cleanshutdown", "log_dir": LOG_DIR, "topic": None, "partition": None,
         "kind": "clean-shutdown", "dir_status": "root"}


def live_names(rows: list[dict], **kw) -> dict[str, bool]:
    return {p.rsplit("/", 1)[-1]: lv.live for p, lv in decide(rows, **kw).items() if p.startswith(PDIR)}


def test_deleted_and_cleaned_files_are_not_live():
    rows = [seg(0, next_offset=10), seg(0, ".deleted", next_offset=30), f(f"{0:020d}.index.deleted", kind="offset-index"),
            f(f"{30:020d}.snapshot.deleted", kind="producer-snapshot"), seg(10, ".cleaned", next_offset=20), CLEAN]
    assert live_names(rows) == {f"{0:020d}.log": True, f"{0:020d}.log.deleted": False, f"{0:020d}.index.deleted": False,
                                f"{30:020d}.snapshot.deleted": False, f"{10:020d}.log.cleaned": False}
    why = decide(rows)[f"{PDIR}/{0:020d}.log.deleted"].reason
    assert "deleted" in why


def test_a_swap_replaces_the_segments_it_covers_with_their_indexes_and_snapshots():
    rows = [seg(0, next_offset=50), f(f"{0:020d}.index", kind="offset-index"), seg(50, next_offset=80),
            f(f"{50:020d}.snapshot", kind="producer-snapshot"), seg(0, ".swap", next_offset=80), seg(80, next_offset=90), CLEAN]
    got = live_names(rows)
    assert got[f"{0:020d}.log.swap"] and got[f"{80:020d}.log"]
    assert not got[f"{0:020d}.log"] and not got[f"{50:020d}.log"]
    assert not got[f"{0:020d}.index"] and not got[f"{50:020d}.snapshot"]


def test_a_swap_above_the_lowest_cleaned_offset_is_an_interrupted_split():
    """KAFKA-6264: such swaps are deleted, and the segments they would replace stay."""
    rows = [seg(0, next_offset=50), seg(20, ".cleaned", next_offset=30), seg(20, ".swap", next_offset=50), CLEAN]
    got = live_names(rows)
    assert got == {f"{0:020d}.log": True, f"{20:020d}.log.cleaned": False, f"{20:020d}.log.swap": False}


def test_recovery_truncates_at_the_first_invalid_batch_after_the_recovery_point():
    rows = [seg(0, next_offset=10), seg(10, status="bad-crc", error_position=117, next_offset=20), seg(20, next_offset=30)]
    lv = decide(rows, recovery_points={(LOG_DIR, "orders", 0): 10})
    bad = lv[f"{PDIR}/{10:020d}.log"]
    assert bad.live and bad.end_position == 100 and "recovery" in bad.reason  # the batch starts 17 bytes before its CRC
    assert not lv[f"{PDIR}/{20:020d}.log"].live
    assert lv[f"{PDIR}/{0:020d}.log"].live and not lv[f"{PDIR}/{0:020d}.log"].bounded


def test_no_recovery_below_the_recovery_point_or_after_a_clean_shutdown():
    rows = [seg(0, status="bad-crc", error_position=17, next_offset=10), seg(10, next_offset=20)]
    below = decide(rows, recovery_points={(LOG_DIR, "orders", 0): 10})
    assert all(lv.live and not lv.bounded for lv in below.values())
    clean = decide(rows + [CLEAN])
    assert all(lv.live and not lv.bounded for lv in clean.values())


def test_overlapping_segments_shadow_the_earlier_ones_batches():
    rows = [seg(0, next_offset=60), seg(50, next_offset=70), CLEAN]
    lv = decide(rows)[f"{PDIR}/{0:020d}.log"]
    assert lv.live and lv.end_offset == 50 and "overlaps" in lv.reason


def test_retired_directories_hold_nothing_live():
    pdir = f"{LOG_DIR}/orders-0.{'a' * 32}-delete"
    rows = [seg(0, dir_status="delete", pdir=pdir), f(f"{0:020d}.index", kind="offset-index", dir_status="delete", pdir=pdir)]
    assert not any(lv.live for lv in decide(rows).values())
    future = [seg(0, dir_status="future", pdir=f"{LOG_DIR}/orders-0.{'b' * 32}-future")]
    assert all(lv.live for lv in decide(future).values())


def test_recovery_points_come_from_the_checkpoint_rows():
    rows = [{"checkpoint_kind": "recovery-point-offset", "log_dir": LOG_DIR, "topic": "orders", "partition": 0, "offset": 7},
            {"checkpoint_kind": "replication-offset", "log_dir": LOG_DIR, "topic": "orders", "partition": 0, "offset": 9}]
    assert recovery_points(rows) == {(LOG_DIR, "orders", 0): 7}


def test_the_audit_context_reads_only_the_live_log(spark, tmp_path):
    """AuditContext.table applies the decision to the rows: a .deleted copy's batches are left
    out, and a segment recovery would truncate keeps only the batches before the bad one."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tables_builder import TableSet
    from auditor.engine.context import AuditContext
    from auditor.ingest.inventory import FILES_SCHEMA

    t = TableSet(tmp_path / "tables")
    for off in range(8):  # the live segment: batches at positions 0, 100, ..., 700
        t.batch("orders", 0, off, producer_id=7, producer_epoch=0, base_sequence=off)
    for off in range(4):  # the cleaner's .deleted copy of the same offsets
        t.batch("orders", 0, off, producer_id=7, producer_epoch=0, base_sequence=off)
        t.rows["batches"][-1]["file"] += ".deleted"
    root = t.write()
    seg = t.rows["batches"][0]["file"]
    base = {"log_dir": "/data/broker-1", "topic": "orders", "partition": 0, "dir_status": "live", "kind": "segment",
            "base_offset": 0, "size": 800, "mtime_ms": 0}
    inv = [{**base, "path": seg, "file_status": "live", "status": "bad-crc", "error_position": 517, "next_offset": 8},
           {**base, "path": seg + ".deleted", "file_status": "deleted", "status": "ok", "next_offset": 4}]
    pq.write_table(pa.Table.from_pylist(inv, schema=FILES_SCHEMA), root / "files" / "part-00000.parquet")
    ctx = AuditContext(spark, str(root))
    rows = ctx.table("batches").select("file", "base_offset").collect()
    assert sorted((r["file"], r["base_offset"]) for r in rows) == [(seg, o) for o in range(5)]
    # no duplicates for the sequence view (a .deleted copy used to look like 4 duplicate batches)
    assert ctx.sequence_breaks.where("duplicate_of_offset IS NOT NULL").count() == 0


def test_the_row_and_dataframe_filters_keep_the_same_rows(spark):
    """One decision, one filter in two forms: keep_rows (timeline, coordinator lookup: pyarrow rows)
    and keep_frame (the audit's tables) keep the same rows, with an inventory and without one."""
    from auditor.model.livelog import Liveness, keep_frame, keep_rows

    def small_df(rows, schema):
        return spark.createDataFrame(rows, schema)

    retired = f"{LOG_DIR}/orders-1.0123456789abcdef0123456789abcdef-delete/00000000000000000000.log"
    rows = [{"file": p, "position": pos, "base_offset": off}
            for p in (f"{PDIR}/a.log", f"{PDIR}/b.log", f"{PDIR}/c.log", f"{PDIR}/d.log", f"{PDIR}/e.log", retired)
            for pos, off in ((0, 0), (100, 5), (200, 10))]
    live = {f"{PDIR}/a.log": Liveness(f"{PDIR}/a.log", True),
            f"{PDIR}/b.log": Liveness(f"{PDIR}/b.log", False, "deleted"),
            f"{PDIR}/c.log": Liveness(f"{PDIR}/c.log", True, "truncated", end_position=150),
            f"{PDIR}/d.log": Liveness(f"{PDIR}/d.log", True, "shadowed", end_offset=5)}
    df = spark.createDataFrame([tuple(r.values()) for r in rows], "file string, position bigint, base_offset bigint")

    def key(rs):
        return sorted((r["file"], r["position"]) for r in rs)

    for decision in (live, None):
        as_rows = keep_rows(rows, "batches", decision)
        as_frame = [r.asDict() for r in keep_frame(df, "batches", decision, small_df).collect()]
        assert key(as_rows) == key(as_frame), decision
    kept = {(r["file"].rsplit("/", 1)[-1], r["position"]) for r in keep_rows(rows, "batches", live)}
    assert ("b.log", 0) not in kept and ("c.log", 200) not in kept and ("d.log", 100) not in kept
    assert {("c.log", 100), ("d.log", 0), ("e.log", 200), ("00000000000000000000.log", 0)} <= kept
    assert not any(r["file"] == retired for r in keep_rows(rows, "batches", None))
