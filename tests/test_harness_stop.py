"""The test harness's clean stop of a KRaft cluster (``scripts/kafka/harness.KafkaCluster.stop``), on
stand-in processes: a node whose peers have exited cannot have its controlled shutdown approved (no
quorum majority), so the stop must SIGKILL it after a grace instead of failing the module that was
only restarting its cluster. A node that overruns the timeout while a quorum is there is still an
error."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from scripts.kafka.harness import BrokerError, KafkaCluster

#: exits at once on SIGTERM (the default action)
OBEYS = "import time\nprint('up', flush=True)\ntime.sleep(600)\n"
#: ignores SIGTERM, as a broker does while it waits for a controller to approve its shutdown
WAITS = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('up', flush=True)\ntime.sleep(600)\n"


def _cluster(tmp_path, scripts: dict[int, str]) -> KafkaCluster:
    """A three-node cluster object whose nodes run ``scripts`` instead of Kafka (nothing is launched)."""
    cluster = KafkaCluster("4.3.1", tmp_path, 3)
    for i, code in scripts.items():
        node = cluster.nodes[i]
        node.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        assert node.proc.stdout.readline().strip() == "up"  # its SIGTERM handler is in place
    return cluster


def test_a_node_left_without_a_quorum_is_killed_not_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(KafkaCluster, "QUORUMLESS_GRACE_S", 0.5)
    cluster = _cluster(tmp_path, {1: OBEYS, 2: WAITS, 3: OBEYS})
    t0 = time.monotonic()
    cluster.stop(timeout=60)
    assert cluster.killed_without_quorum == [2]
    assert not cluster.running and time.monotonic() - t0 < 30
    assert cluster.nodes[2].proc.returncode == -9


def test_a_node_that_overruns_while_a_quorum_is_there_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(KafkaCluster, "QUORUMLESS_GRACE_S", 60.0)
    cluster = _cluster(tmp_path, {1: WAITS, 2: WAITS, 3: OBEYS})
    with pytest.raises(BrokerError, match="did not stop within 1.0s"):
        cluster.stop(timeout=1.0)
    assert cluster.killed_without_quorum == [] and not cluster.running


def test_a_clean_stop_kills_nothing(tmp_path):
    cluster = _cluster(tmp_path, {1: OBEYS, 2: OBEYS, 3: OBEYS})
    cluster.stop(timeout=60)
    assert cluster.killed_without_quorum == [] and not cluster.running
    assert all(n.proc.returncode == -15 for n in cluster.nodes.values())
