"""Differential test of the ``__cluster_metadata`` decoder against Kafka's own generated classes.

``scripts/kafka/java/MetadataRecordSamples.java`` makes Kafka (4.3.1 and 4.4.0 jars) encode every
``MetadataRecordType`` at every version it supports — scalar fields set to distinct non-default values
where the version has them — and render each with the generated ``JsonConverter`` (what
``kafka-dump-log --cluster-metadata-decoder`` prints). Our :func:`decode_metadata_value` must give
the same JSON, name every type as Kafka's enum does, and support exactly Kafka's version range for
each type it decodes. Kafka 4.4.0 adds one type to 4.3.1's: ``UnregisterControllerRecord`` (api key
29). The types the auditor names and counts without decoding (delegation tokens, SCRAM credentials,
client quotas, ACLs) are listed here so a new undecoded type cannot slip in unnoticed.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import PROJECT
from auditor.formats.metadata import RECORD_TYPES, _SCHEMAS, decode_metadata_value

from scripts.kafka.harness import KAFKA_4_4, NEWEST, classpath

SOURCE = PROJECT / "scripts" / "kafka" / "java" / "MetadataRecordSamples.java"
NOT_DECODED = {10, 11, 14, 18, 19, 22, 26}  # tokens, SCRAM, quotas, ACLs: named and counted only


def _samples(version: str) -> list[dict]:
    proc = subprocess.run(["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", classpath(version), str(SOURCE)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module", params=[NEWEST, KAFKA_4_4])
def samples(request) -> tuple[str, list[dict]]:
    return request.param, _samples(request.param)


def test_every_record_kafka_encodes_decodes_to_kafkas_json(samples):
    version, recs = samples
    decoded = 0
    for s in recs:
        row = decode_metadata_value(bytes.fromhex(s["value_hex"]))
        where = f"Kafka {version} {s['type']} v{s['version']}"
        assert (row["api_key"], row["record_type"], row["record_version"]) == (s["api_key"], s["type"], s["version"]), where
        if s["api_key"] in NOT_DECODED:
            assert row["data_json"] is None, where
            continue
        assert row["data_json"] is not None, f"{where}: no schema"
        assert json.loads(row["data_json"]) == s["json"], where
        assert row["unknown_tags_json"] is None, where
        decoded += 1
    assert decoded >= 30


def test_types_and_version_ranges_are_kafkas(samples):
    version, recs = samples
    kafka = {}
    for s in recs:
        kafka.setdefault(s["api_key"], (s["type"], []))[1].append(s["version"])
    assert {k: n for k, (n, _) in kafka.items()} == {k: RECORD_TYPES[k] for k in kafka}
    for key, (name, versions) in kafka.items():
        if key in NOT_DECODED:
            assert key not in _SCHEMAS, name
            continue
        schema = _SCHEMAS[key]
        assert [v for v in range(0, 64) if schema.supports(v)] == sorted(versions), name
    if version == KAFKA_4_4:
        assert kafka[29] == ("UNREGISTER_CONTROLLER_RECORD", [0])
        assert set(_SCHEMAS) <= set(kafka)
    else:  # what we decode beyond 4.3.1: the type 4.4.0 added
        assert set(_SCHEMAS) - set(kafka) == {29}
