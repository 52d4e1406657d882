"""AuditContext's attribute look-up: views, facts and helpers by name, and the class's own errors kept."""

from __future__ import annotations

from functools import cached_property

import pytest

from auditor.engine.context import AuditContext


class _Broken(AuditContext):
    @property
    def broken(self):
        return {}["missing"].real  # KeyError, not AttributeError: no look-up fallback involved

    @cached_property
    def inner(self):
        return object().no_such_thing  # AttributeError raised inside the property


def test_a_property_raising_attribute_error_shows_its_own_error(tmp_path):
    ctx = _Broken(None, str(tmp_path))
    with pytest.raises(AttributeError, match="no_such_thing"):
        ctx.inner
    with pytest.raises(KeyError):
        ctx.broken


def test_an_unknown_name_is_an_attribute_error_naming_it(tmp_path):
    with pytest.raises(AttributeError, match="'nonexistent_view'"):
        AuditContext(None, str(tmp_path)).nonexistent_view


def _inventory(tmp_path, rows, manifest):
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    from auditor.ingest.inventory import FILES_SCHEMA

    (tmp_path / "files").mkdir(parents=True)
    full = [{f.name: r.get(f.name) for f in FILES_SCHEMA} for r in rows]
    pq.write_table(pa.Table.from_pylist(full, schema=FILES_SCHEMA), tmp_path / "files" / "part-00000.parquet")
    (tmp_path / "_ingest.json").write_text(json.dumps(manifest))
    return AuditContext(None, str(tmp_path))


def _file(log_dir, topic, partition, kind="segment"):
    return {"path": f"{log_dir}/{topic}-{partition}/00000000000000000000.log", "log_dir": log_dir, "topic": topic,
            "partition": partition, "kind": kind}


def test_replicated_partitions_from_our_own_inventory(tmp_path):
    """``replicated_partitions`` (what lets replica-divergence skip its query without a Spark job)
    is False only when our ingest's inventory holds each partition in one log dir: a superset of
    the replicas the partitions view counts. Tables we did not ingest, or kafka-dump-log text
    (several replicas' segments in one file), cannot tell."""
    from auditor.ingest.dumplog import SEGMENT_KINDS

    ours = {"run_id": "r1", "tables": {}}
    one = [_file("/a", "t", 0), _file("/a", "t", 1), _file("/b", "u", 0)]
    assert _inventory(tmp_path / "one", one, ours).replicated_partitions is False
    assert _inventory(tmp_path / "two", [*one, _file("/b", "t", 1)], ours).replicated_partitions is True
    assert _inventory(tmp_path / "hand", one, {"tables": {}}).replicated_partitions is None
    text = [*one, _file("/c", "t", 0, kind=sorted(SEGMENT_KINDS)[0])]
    assert _inventory(tmp_path / "text", text, ours).replicated_partitions is None
    assert _inventory(tmp_path / "empty", [], ours).replicated_partitions is None
