"""Smoke test of the broker-as-oracle tool (tests/kafka_oracle.py, scripts/kafka/java/LogStateOracle.java).

Kafka's own log loader (UnifiedLog.create / LogLoader / ProducerStateManager), of 4.3.1 and of 4.4.0
(the same Java source runs on both), loads copies of the partition directories of four sample
captures, three written by 4.3.1 / 3.5.2 and ``kafka-4.4`` by a 4.4.0 broker, plus that capture's
metadata log (whose active .index/.timeindex 4.4.0 left at their preallocated 10 MiB); what it
reports must agree with the scenario ground truth in each ``expected.json`` (recorded by the
clients, not by the auditor), and the input directories must be byte-for-byte unchanged afterwards. Needs a JDK 17 and the Maven Central jars
(fetched by scripts/kafka/fetch.sh through harness.classpath when missing); nothing is skipped: a
missing JDK or jar fails the test.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from conftest import SAMPLE_LOGS
from kafka_oracle import METADATA_DIR, load_partitions, log_dir_now_ms, requests_for_log_dirs
from scripts.kafka.harness import KAFKA_4_4, NEWEST

# like the other tests that run Kafka's Java code (test_live_broker, test_find_hanging): the project
# has no separate marker for "needs Java"
pytestmark = pytest.mark.spark

SCENARIOS = ("clean", "open-at-crash", "hanging-late-write", "kafka-4.4")


def _tree_digest(root: Path) -> dict[str, tuple]:
    """Every entry under root: files by SHA-256, size and mode; dirs and links by kind."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", st.st_mode)
            else:
                out[rel] = ("file", st.st_size, st.st_mode, st.st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
    return out


@pytest.fixture(scope="module", params=[NEWEST, KAFKA_4_4])
def oracle(request, tmp_path_factory):
    log_dirs = [SAMPLE_LOGS / s / "broker-1" for s in SCENARIOS]
    before = {str(d): _tree_digest(d) for d in log_dirs}
    requests = requests_for_log_dirs(log_dirs)
    # the 4.4.0 capture's metadata log, loaded like a partition (the raft layer's KafkaMetadataLog
    # loads it with UnifiedLog too); its indexes are preallocated at 10 MiB (segment.index.bytes)
    k44 = SAMPLE_LOGS / "kafka-4.4" / "broker-1"
    metadata = {"dir": str(k44 / METADATA_DIR), "topic": "__cluster_metadata", "partition": 0,
                "clean_shutdown": True, "now_ms": log_dir_now_ms(k44)[0],
                "log_config": {"segment.index.bytes": str(10 * 1024 * 1024)}}
    bogus = {"dir": str(tmp_path_factory.mktemp("missing") / "nowhere-0"), "now_ms": 0}
    java_tmp = tmp_path_factory.mktemp("oracle-java-tmp")
    answers = load_partitions(requests + [metadata, bogus], version=request.param, tmp_dir=java_tmp,
                              stderr_file=tmp_path_factory.mktemp("oracle-log") / "stderr.txt")
    after = {str(d): _tree_digest(d) for d in log_dirs}
    by_key = {}
    for req, ans in zip(requests, answers):
        scenario = Path(req["log_dir"]).parent.name
        by_key[(scenario, ans["topic"], ans["partition"])] = (req, ans)
    return {"version": request.param, "requests": requests, "answers": answers, "by_key": by_key, "before": before,
            "after": after, "java_tmp": java_tmp, "metadata": answers[-2], "bogus": answers[-1]}


def _expected(scenario: str) -> dict:
    return json.loads((SAMPLE_LOGS / scenario / "expected.json").read_text())


def test_every_live_partition_is_loaded_without_error(oracle):
    for scenario in SCENARIOS:
        log_dir = SAMPLE_LOGS / scenario / "broker-1"
        dirs = {p.name for p in log_dir.iterdir() if p.is_dir() and p.name != "__cluster_metadata-0"}
        loaded = {f"{t}-{p}" for (s, t, p) in oracle["by_key"] if s == scenario}
        assert loaded == dirs, scenario
    for req, ans in oracle["by_key"].values():
        assert ans["error"] is None, (req["dir"], ans["error"])
        assert ans["dir"] == req["dir"]
        assert ans["segments"] == sorted(ans["segments"]) and ans["segments"], req["dir"]
        assert ans["log_start_offset"] <= ans["last_stable_offset"] <= ans["high_watermark"] <= ans["log_end_offset"]
        assert [p["producer_id"] for p in ans["producers"]] == sorted(p["producer_id"] for p in ans["producers"])


def test_a_bad_request_is_reported_and_does_not_stop_the_run(oracle):
    bogus = oracle["bogus"]
    assert bogus["error"] and "NoSuchFileException" in bogus["error"]
    assert bogus["log_end_offset"] is None and bogus["producers"] is None


def test_inputs_are_unchanged_and_copies_removed(oracle):
    assert oracle["after"] == oracle["before"]
    assert list(Path(oracle["java_tmp"]).iterdir()) == []


def _healthy(oracle, scenario: str) -> dict:
    """Checks of a clean capture with nothing open; returns its expected.json ``expect``."""
    exp = _expected(scenario)["expect"]
    assert exp["anomalies"] == []
    items = [(k, v) for k, v in oracle["by_key"].items() if k[0] == scenario]
    assert len(items) >= 14
    for (_, topic, partition), (req, ans) in items:
        assert req["clean_shutdown"] is True
        assert req["high_watermark"] is not None, (topic, partition)
        assert ans["high_watermark"] == req["high_watermark"] == ans["log_end_offset"], (topic, partition)
        assert ans["last_stable_offset"] == ans["high_watermark"], (topic, partition)
        assert ans["first_unstable_offset"] is None
        assert ans["ongoing_transactions"] == [] and ans["unreplicated_transactions"] == []
        assert all(p["current_txn_first_offset"] is None for p in ans["producers"])
        # a clean shutdown needs no recovery: no segment or snapshot is created or deleted
        changes = ans["files_changed_by_load"]
        assert changes["deleted"] == [] and changes["created"] == [], (topic, partition, changes)
    for name, offsets in exp["end_offsets_before_shutdown"].items():
        topic, partition = name.rsplit("-", 1)
        _, ans = oracle["by_key"][(scenario, topic, int(partition))]
        assert ans["high_watermark"] == offsets["high_watermark"], name
        assert ans["last_stable_offset"] == offsets["last_stable_offset"], name
    return exp


def test_clean(oracle):
    _healthy(oracle, "clean")
    for partition in range(3):  # README: orders 0-2, 4 segments each
        assert len(oracle["by_key"][("clean", "orders", partition)][1]["segments"]) == 4


def test_kafka_4_4(oracle):
    """The 4.4.0 capture: healthy for both loaders; every producer the clients used is in the state
    of the partitions it wrote, with the epoch the client held last (TV2: bumped per transaction)."""
    full = _expected("kafka-4.4")
    _healthy(oracle, "kafka-4.4")
    for txn in full["transactions"]:
        for name in txn["partitions"]:
            topic, partition = name.rsplit("-", 1)
            _, ans = oracle["by_key"][("kafka-4.4", topic, int(partition))]
            assert txn["producer_id"] in {p["producer_id"] for p in ans["producers"]}, (name, txn["transactional_id"])
    last_epoch = {}
    for txn in full["transactions"]:
        last_epoch[txn["producer_id"]] = txn["marker_epoch"]
    for (scenario, topic, _), (_, ans) in oracle["by_key"].items():
        if scenario == "kafka-4.4" and topic == "orders":
            for p in ans["producers"]:
                if p["producer_id"] in last_epoch:
                    assert p["producer_epoch"] <= last_epoch[p["producer_id"]], (topic, p)


def test_untrimmed_metadata_log_loads_unchanged(oracle):
    """sample_logs/kafka-4.4's __cluster_metadata-0 with its 10 MiB preallocated indexes (one entry
    each): both versions load it without error or recovery, and change no file."""
    md = oracle["metadata"]
    assert md["error"] is None, md["error"]
    assert md["segments"] == [0]
    assert md["log_end_offset"] > 0 and md["log_start_offset"] == 0
    assert md["files_changed_by_load"] == {"deleted": [], "created": [], "modified": []}
    sizes = _expected("kafka-4.4")["capture_checks"]["metadata_log_indexes_at_stop"]
    assert sizes["00000000000000000000.index"]["size"] == 10 * 1024 * 1024


def _open_txn_checks(oracle, scenario: str, anomaly: dict) -> dict:
    req, ans = oracle["by_key"][(scenario, anomaly["topic"], anomaly["partition"])]
    first = anomaly["first_offset"]
    assert ans["first_unstable_offset"] == first, (scenario, anomaly)
    assert ans["ongoing_transactions"] == [{"producer_id": anomaly["producer_id"], "first_offset": first, "last_offset": None}]
    producer = {p["producer_id"]: p for p in ans["producers"]}[anomaly["producer_id"]]
    assert producer["producer_epoch"] == anomaly["producer_epoch"]
    assert producer["current_txn_first_offset"] == first
    assert producer["last_data_offset"] == anomaly["last_offset"]
    return ans


def test_open_at_crash(oracle):
    exp = _expected("open-at-crash")["expect"]
    anomalies = [a for a in exp["anomalies"] if a["type"] == "open-transaction"]
    assert len(anomalies) == 2
    for a in anomalies:
        ans = _open_txn_checks(oracle, "open-at-crash", a)
        req, _ = oracle["by_key"][("open-at-crash", a["topic"], a["partition"])]
        assert req["clean_shutdown"] is False
        before = exp["end_offsets_before_shutdown"][f"{a['topic']}-{a['partition']}"]
        # recovery keeps every acknowledged record (acks=all on one replica: all were flushed to the page cache)
        assert ans["log_end_offset"] == before["high_watermark"]
        # SIGKILL before the first replication-offset-checkpoint write: the file is empty, no HW is
        # applied, the HW stays at the log start offset and the LSO with it
        assert req["high_watermark"] is None
        assert ans["high_watermark"] == ans["log_start_offset"] == ans["last_stable_offset"] == 0
        # recovery rebuilt the producer state and took a snapshot at the log end
        assert f"{ans['log_end_offset']:020d}.snapshot" in ans["files_changed_by_load"]["created"]


def test_hanging_late_write(oracle):
    exp = _expected("hanging-late-write")["expect"]
    (a,) = [a for a in exp["anomalies"] if a["type"] == "hanging-transaction"]
    ans = _open_txn_checks(oracle, "hanging-late-write", a)
    assert ans["last_stable_offset"] == a["last_stable_offset"] == a["first_offset"]
    for name, offsets in exp["end_offsets_before_shutdown"].items():
        topic, partition = name.rsplit("-", 1)
        _, got = oracle["by_key"][("hanging-late-write", topic, int(partition))]
        assert got["high_watermark"] == offsets["high_watermark"], name
        assert got["last_stable_offset"] == offsets["last_stable_offset"], name
    _, other = oracle["by_key"][("hanging-late-write", "transfers", 1)]
    assert other["first_unstable_offset"] is None and other["ongoing_transactions"] == []
