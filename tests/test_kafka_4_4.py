"""What Kafka 4.4.0 writes that 4.3.1 did not, on the real capture ``sample_logs/kafka-4.4``.

The clean stop of a 4.4.0 broker leaves the metadata log's active ``.index`` / ``.timeindex`` at
their preallocated 10 MiB: 4.4.0 moved index trimming out of ``AbstractIndex.close()`` into
``LogSegment.onBecomeInactiveSegment()``, reached at shutdown only through
``UnifiedLog.prepareActiveSegmentForClose()``, which ``LogManager`` calls for partition logs and the
raft ``KafkaMetadataLog`` does not. Here: the decoder stops where ``DumpLogSegments.dumpIndex`` /
``dumpTimeIndex`` stop (no phantom entries; the tool's own output on these files is compared in
``test_dump_parity.py``), the entries agree with the segment, reads stay bounded, ``dump`` exits 0,
and every metadata record 4.4.0 wrote decodes. The sizes come from the capture script's own check
of the stopped log dir (``capture_checks`` in expected.json), not from the auditor.
"""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from conftest import CountingReader, SAMPLE_LOGS
from auditor.cli.main import cli
from auditor.formats.batch import iter_segment
from auditor.formats.offset_index import check_offset_index, check_time_index, iter_offset_index, iter_time_index
from auditor.ingest.plan import make_plan
from auditor.ingest.tables import TABLES, iter_rows

CAPTURE = SAMPLE_LOGS / "kafka-4.4"
METADATA = CAPTURE / "broker-1" / "__cluster_metadata-0"
INDEX = METADATA / "00000000000000000000.index"
TIMEINDEX = METADATA / "00000000000000000000.timeindex"


def _expected() -> dict:
    return json.loads((CAPTURE / "expected.json").read_text())


def test_capture_is_kafka_4_4_and_its_indexes_are_as_the_stop_left_them():
    exp = _expected()
    assert exp["kafka_version"] == "4.4.0" and exp["expect"]["anomalies"] == [] and exp["excluded_files"] == []
    at_stop = exp["capture_checks"]["metadata_log_indexes_at_stop"]
    for f in (INDEX, TIMEINDEX):
        assert os.path.getsize(f) == at_stop[f.name]["size"] >= 10 * 1024 * 1024 - 12
    # partition logs are still trimmed at a clean stop (LogManager -> prepareActiveSegmentForClose)
    for f in (CAPTURE / "broker-1").glob("orders-*/*index"):
        assert os.path.getsize(f) < 4096, f


def test_untrimmed_indexes_stop_at_the_zeros_and_agree_with_the_segment():
    log = METADATA / "00000000000000000000.log"
    with open(log, "rb") as f:
        batches = [b for b in iter_segment(f, file_size=os.path.getsize(log)) if not hasattr(b, "kind")]
    last = {b.position: b.last_offset for b in batches}
    for path, fn, entry, check in ((INDEX, iter_offset_index, 8, check_offset_index),
                                   (TIMEINDEX, iter_time_index, 12, check_time_index)):
        data = path.read_bytes()
        used = len(data.rstrip(b"\0"))
        f = CountingReader(data)
        items = list(fn(f, len(data), 0))
        rows = [i for i in items if isinstance(i, dict)]
        notes = [i for i in items if not isinstance(i, dict)]
        assert len(rows) == -(-used // entry) >= 1, path  # the non-zero prefix, whole entries, nothing after
        assert [(n.kind, n.position) for n in notes] == [("zero-tail", len(rows) * entry)], notes
        assert f.max_read <= 1 << 20  # chunked (the zero check reads 1 MiB at a time), never the 10 MiB at once
        assert check(rows, batches) == [], path
    offset_rows = [r for r in iter_offset_index(open(INDEX, "rb"), os.path.getsize(INDEX), 0) if isinstance(r, dict)]
    assert all(last[r["position"]] == r["offset"] for r in offset_rows)


def test_dump_says_the_zero_tail_and_exits_0(tmp_path):
    res = CliRunner().invoke(cli, ["dump", str(INDEX), str(TIMEINDEX)])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.strip()]
    assert [r["index_kind"] for r in rows] == ["offset", "time"]
    assert res.stderr.count("zero-tail") == 2
    # non-zero bytes after the stop are damage, not preallocation: exit 1
    bad = tmp_path / "__cluster_metadata-0" / "00000000000000000000.index"
    bad.parent.mkdir()
    bad.write_bytes(INDEX.read_bytes()[:8] + b"\0" * 4096 + b"\x07" + b"\0" * 7)
    res = CliRunner().invoke(cli, ["dump", str(bad)])
    assert res.exit_code == 1 and "corrupt" in res.stderr


def test_every_metadata_record_4_4_wrote_decodes():
    plan = make_plan([str(METADATA)], split_bytes=1 << 62)
    tasks = [t for t in plan.tasks if t["kind"] in ("segment", "kraft-snapshot")]
    assert {t["kind"] for t in tasks} == {"segment", "kraft-snapshot"}  # 4.4.0 keeps the bootstrap snapshot
    rows = [r for t in tasks for r in iter_rows(TABLES["metadata_records"], t)]
    assert rows and not [r for r in rows if r.get("_problem_kind")]
    assert all(r["data_json"] is not None for r in rows), {r["record_type"] for r in rows if r["data_json"] is None}
    assert {"PRODUCER_IDS_RECORD", "FEATURE_LEVEL_RECORD", "REGISTER_CONTROLLER_RECORD"} <= {r["record_type"] for r in rows}
    features = {r["feature_name"]: r["feature_level"] for r in rows if r["record_type"] == "FEATURE_LEVEL_RECORD"}
    assert features.get("transaction.version") == 2
