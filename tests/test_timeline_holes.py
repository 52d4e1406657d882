"""Offsets no segment as read holds, between two that do: the model's holes
(:func:`auditor.model.replica.offset_holes`) as the timeline's pyarrow engine finds them
(:func:`auditor.model.replica.offset_holes_of_rows`), and the row the replay shows where it
passes one. No Spark: ``test_broker_oracle`` compares the two executions of the rule on every
partition of sample_logs/, ``test_forensics_fast`` the two timelines."""

from __future__ import annotations

from auditor.forensics.replay import Replay, ReplayOptions
from auditor.model.replica import offset_holes_of_rows


def _batch(offset: int, segment: int, *, count: int = 1, magic: int = 2, pid: int = -1, epoch: int = -1,
           transactional: bool = False, control: str | None = None, file: str | None = None, ts: int = 1000) -> dict:
    return {"source": "segment", "file": file or f"/data/t-0/{segment:020d}.log", "segment_base_offset": segment,
            "base_offset": offset, "last_offset": offset + count - 1, "magic": magic, "producer_id": pid,
            "producer_epoch": epoch, "base_sequence": 0 if pid >= 0 and not control else -1,
            "last_sequence": count - 1 if pid >= 0 and not control else -1, "is_transactional": transactional,
            "is_control": control is not None, "control_type": control, "coordinator_epoch": 0 if control else None,
            "record_count": count, "max_timestamp": ts + offset}


def test_a_hole_is_where_a_segment_starts_after_the_previous_ones_end():
    rows = [_batch(0, 0, count=10), _batch(10, 10, count=5),  # contiguous: no hole
            _batch(20, 15, count=5),  # the segment at 15 starts with 20: the cleaner emptied its start
            _batch(30, 30, count=5),  # 25..29 in no segment
            _batch(50, 50)]  # 35..49 in no segment
    assert offset_holes_of_rows(rows) == [(25, 30), (35, 50)]


def test_no_hole_across_legacy_entries_remote_segments_or_other_sources():
    legacy = [_batch(0, 0, count=10), _batch(20, 20, magic=1)]
    assert offset_holes_of_rows(legacy) == []
    remote_file = "/remote/t-0-AAAAAAAAAAAAAAAAAAAAAA/00000000000000000100-AAAAAAAAAAAAAAAAAAAAAA.log"
    tiered = [_batch(100, 100, count=10, file=remote_file), _batch(200, 200, count=10)]
    assert offset_holes_of_rows(tiered) == []  # the remote part below the first local segment
    dumped = [_batch(0, 0, count=10), {**_batch(40, 40), "source": "dump-text"}]
    assert offset_holes_of_rows(dumped) == []


def test_the_replay_shows_a_hole_where_it_passes_it_and_keeps_the_state():
    rows = [_batch(0, 0, pid=7, epoch=0, transactional=True),
            _batch(1, 0, pid=8, epoch=0),
            _batch(5, 5, pid=8, epoch=0),
            _batch(6, 5, pid=7, epoch=0, control="COMMIT")]
    with_holes = list(Replay(ReplayOptions(summary=False, holes=((2, 5),))).run(rows))
    without = list(Replay(ReplayOptions(summary=False)).run(rows))
    kinds = [e["event"] for e in with_holes]
    assert kinds.count("gap") == 1
    gap = with_holes[kinds.index("gap")]
    assert (gap["offset"], gap["last_offset"], gap["missing_offsets"], gap["source"]) == (2, 4, 3, "log")
    assert "3 offsets in no segment of the input" in gap["detail"]
    # shown after the batch before the hole and before the one after it
    assert [e["offset"] for e in with_holes[kinds.index("gap") - 1:kinds.index("gap") + 2]] == [1, 2, 5]
    # the replay's state is the same with or without the row
    assert [e for e in with_holes if e["event"] != "gap"] == without
