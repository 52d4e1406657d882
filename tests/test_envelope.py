"""The one-pass decode (auditor/ingest/envelope.py) carries exactly what each
table's own decode yields: same rows per table, same problems, and per-file
counts and next offsets that agree with the rows. Spark-free: this is what a
decode task runs; the Spark side is covered by the ingest and scenario tests."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from conftest import SAMPLE_LOGS
from auditor.ingest import envelope
from auditor.ingest.plan import make_plan
from auditor.ingest.tables import TABLES, iter_rows


def _canon(rows: list[dict]) -> list[str]:
    return sorted(repr(sorted(r.items())) for r in rows)


def _plan(name: str):
    return make_plan([str(SAMPLE_LOGS / name)], 128 << 20)


def test_envelope_rows_equal_each_tables_own_decode():
    plan = _plan("hanging-late-write")
    env = pa.Table.from_batches([rb for t in plan.tasks for rb in envelope.decode_task_all(t)],
                                schema=envelope.ENVELOPE_SCHEMA)
    tables = envelope.tables_of(env, list(TABLES))
    non_empty = 0
    for name, spec in TABLES.items():
        own = [r for t in plan.tasks if spec.accepts(t) for r in iter_rows(spec, t) if r.get("_problem_kind") is None]
        own = pa.Table.from_pylist(own, schema=spec.schema).to_pylist()  # keys a decoder leaves out are nulls
        got = tables[name]
        assert got.schema.equals(spec.schema), name
        assert _canon(got.to_pylist()) == _canon(own), name
        non_empty += bool(own)
    assert non_empty >= 8  # segments, txn log, metadata, snapshots, indexes, checkpoints, ...


def test_summary_counts_and_next_offsets_agree_with_the_rows():
    plan = _plan("hanging-late-write")
    env = pa.Table.from_batches([rb for t in plan.tasks for rb in envelope.decode_task_all(t)],
                                schema=envelope.ENVELOPE_SCHEMA)
    s = envelope.summarize(env.select(envelope.SUMMARY_COLUMNS).to_pylist())
    tables = envelope.tables_of(env, list(TABLES))
    for name, t in tables.items():
        assert s.table_rows([name])[name] == t.num_rows, name
    b = tables["batches"]
    for path in set(b.column("file").to_pylist()):
        mine = b.filter(pc.equal(b.column("file"), path))
        assert s.next_offsets[path] == pc.max(mine.column("last_offset")).as_py() + 1, path
        assert s.counts[path]["batches"] == mine.num_rows


def test_problems_travel_with_their_table_and_position(tmp_path):
    good = next(p for p in (SAMPLE_LOGS / "hanging-late-write").rglob("*.log") if p.stat().st_size > 200)
    part = tmp_path / "t-0"
    part.mkdir()
    bad = part / "00000000000000000000.log"
    data = bytearray(good.read_bytes())
    bad.write_bytes(bytes(data[: len(data) - 7]))  # truncated inside the last batch
    plan = make_plan([str(bad)], 128 << 20)
    rows = [r for t in plan.tasks for rb in envelope.decode_task_all(t) for r in rb.to_pylist()]
    problems = [r for r in rows if r["problem_kind"] is not None]
    assert problems, rows
    assert all(r["payload"] is None and r["file"] == str(bad) for r in problems)
    assert {r["table"] for r in problems} == {"batches"}
    assert all(0 < r["problem_position"] < len(data) for r in problems)
    s = envelope.summarize(rows)
    assert s.problems[str(bad)][0][2].startswith("[batches] ")
