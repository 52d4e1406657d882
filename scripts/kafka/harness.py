"""Run real Apache Kafka brokers (KRaft, combined broker+controller nodes) for tests: one node
(:class:`KafkaBroker`) or a small cluster of them with a shared controller quorum (:class:`KafkaCluster`);
for Kafka 3.x also one ZooKeeper-mode broker with its own standalone ZooKeeper
(``KafkaBroker(..., zookeeper=True)``, :class:`ZooKeeper`), the mode that still writes message formats 0/1.

Why this exists: the auditor's ground truth must come from the real thing. This module starts
Kafka's own server classes (``kafka.Kafka``) from the jars that ``scripts/kafka/fetch.sh`` resolves
from Maven Central into ``build/kafka/<version>/libs`` — no Docker, no distribution tarball — on
127.0.0.1 with free ports, and stops it cleanly (SIGTERM, the broker trims indexes and writes
producer snapshots and checkpoints) or kills it (SIGKILL, the log dir is left as after a crash).

Self-contained on purpose (standard library only for the broker; kafka-python's protocol classes
for :class:`RawConnection`), so scripts and tests can import it without the project. The broker
never outlives the Python process: the child gets ``PR_SET_PDEATHSIG`` = SIGKILL on Linux (note:
that fires when the *thread* that started it exits, so start brokers from a long-lived thread) and
an ``atexit`` hook kills whatever is still running.

Configuration minimums that shaped the defaults: Kafka 4.x refuses ``log.segment.bytes`` /
``segment.bytes`` below 1 MiB (use the internal topic config ``internal.segment.bytes`` for small
segments; 3.x accepts ``segment.bytes`` down to 14 bytes); the KRaft metadata log ignores
``log.index.size.max.bytes`` (its indexes are preallocated at 10 MiB); log retention tasks start
after ``log.initial.task.delay.ms`` (30 s by default, an internal config in 4.x). Kafka 4.4.0 no
longer trims the metadata log's active indexes at a clean stop: trimming moved from
``AbstractIndex.close()`` to ``UnifiedLog.prepareActiveSegmentForClose()``, which only
``LogManager`` calls at shutdown, so ``__cluster_metadata-0``'s active ``.index``/``.timeindex`` stay
at their preallocated 10 MiB (partition logs are still trimmed).

Usage::

    from scripts.kafka.harness import KafkaBroker, KafkaCluster
    with KafkaBroker("4.3.1", workdir) as broker:     # start() on enter, stop() on exit
        broker.bootstrap                               # "127.0.0.1:<port>"
        broker.log_dir                                 # <workdir>/data
    with KafkaBroker("3.5.2", workdir, {"inter.broker.protocol.version": "2.8",
                     "log.message.format.version": "2.8"}, zookeeper=True) as broker:  # ZooKeeper mode
        ...
    with KafkaCluster("4.3.1", workdir, 3) as cluster: # nodes 1-3, each broker+controller, 3 voters
        cluster.bootstrap                              # "127.0.0.1:<p1>,127.0.0.1:<p2>,127.0.0.1:<p3>"
        cluster.nodes[2].kill(); cluster.nodes[2].start()   # SIGKILL one node, bring it back
        cluster.log_dirs()                             # {1: <workdir>/node-1/data, ...}
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import Mapping

ROOT = Path(__file__).resolve().parents[2]
FETCH = Path(__file__).resolve().parent / "fetch.sh"

#: versions pinned by the project. ``NEWEST`` is the 4.x the captures in sample_logs/ and the
#: version-neutral tests use (the newest 4.x when they were recorded; kept so that re-running a
#: scenario reproduces what is checked in). ``KAFKA_4_4`` is 4.4.0, the newest 4.x on Maven Central:
#: its own capture (sample_logs/kafka-4.4), its DumpLogSegments and its UnifiedLog run beside 4.3.1's
#: in the parity and oracle tests. ``PRE_VERIFICATION`` is a 3.x release from before transaction
#: verification (KIP-890 part 1 arrived in 3.6). scripts/setup.sh fetches all of ``VERSIONS``.
NEWEST = "4.3.1"
KAFKA_4_4 = "4.4.0"
PRE_VERIFICATION = "3.5.2"
VERSIONS = (KAFKA_4_4, NEWEST, PRE_VERIFICATION)

_LIVE: "weakref.WeakSet[KafkaBroker]" = weakref.WeakSet()


class BrokerError(RuntimeError):
    """The broker could not be formatted, started or stopped (message carries its log tail)."""


def libs_dir(version: str, fetch: bool = True) -> Path:
    """``build/kafka/<version>/libs``; resolved with fetch.sh (Maven) when missing and ``fetch``."""
    d = ROOT / "build" / "kafka" / version / "libs"
    if (d / ".complete").exists():
        return d
    if not fetch:
        raise BrokerError(f"Kafka {version} jars missing: run scripts/kafka/fetch.sh {version}")
    r = subprocess.run(["bash", str(FETCH), version], capture_output=True, text=True, timeout=900)
    if r.returncode != 0 or not (d / ".complete").exists():
        raise BrokerError(f"fetch.sh {version} failed ({r.returncode}): {r.stderr[-2000:]}")
    return d


def classpath(version: str) -> str:
    """All jars of the version, with exactly one SLF4J binding (slf4j-simple).

    Kafka 3.x ships slf4j-reload4j; our pom adds slf4j-simple for both versions so logging is
    configured the same way (system properties) everywhere. Two bindings would make SLF4J pick
    one at random, so reload4j's binding is left out.
    """
    jars = sorted(p for p in libs_dir(version).glob("*.jar") if not p.name.startswith("slf4j-reload4j"))
    return os.pathsep.join(str(p) for p in jars)


def java_command(version: str, main: str, *args: str, heap: str = "512m", log_level: str = "info") -> list[str]:
    """``java`` running ``main`` from the jars of ``version`` (SLF4J simple logger at ``log_level``)."""
    return [
        "java",
        f"-Xmx{heap}",
        "-Xms64m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Djava.awt.headless=true",
        f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}",
        "-Dorg.slf4j.simpleLogger.showDateTime=true",
        "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
        "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
        "-Dorg.slf4j.simpleLogger.log.kafka.utils.Log4jControllerRegistration$=warn",
        "-Dlog4j.configuration=file:" + str(Path(__file__).resolve().parent / "log4j" / "log4j.properties"),
        "-Dlog4j2.configurationFile=" + str(Path(__file__).resolve().parent / "log4j" / "log4j2.properties"),
        "-cp",
        classpath(version),
        main,
        *args,
    ]


def cluster_id_for(name: str) -> str:
    """A deterministic KRaft cluster id (Kafka's base64url Uuid, 22 chars) derived from ``name``."""
    raw = bytearray(hashlib.sha256(name.encode()).digest()[:16])
    raw[0] &= 0x7F  # keep away from the reserved zero/one ids and negative-looking ids
    raw[0] |= 0x10
    return base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")


def free_port() -> int:
    """A port that is free on 127.0.0.1 right now (bound to 0 and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pdeathsig() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setpgrp()  # own process group: a Ctrl-C aimed at pytest does not SIGINT the broker first


def _own_group() -> None:  # runs in the child between fork and exec
    os.setpgrp()


def _child_setup():
    """What a started broker or ZooKeeper runs before exec. PR_SET_PDEATHSIG fires when the *thread*
    that forked the child ends, not the process: a broker restarted from a worker thread (a test's
    chaos thread) was SIGKILLed as soon as that thread returned, so the rest of the test ran against
    a dead broker and its "clean stop" was none. Only a child of the main thread gets it; the others
    are killed at exit by :func:`_kill_all` like every live node."""
    return _pdeathsig if threading.current_thread() is threading.main_thread() else _own_group


def _kill_all() -> None:
    for b in list(_LIVE):
        try:
            b.kill()
        except Exception:  # noqa: BLE001 - best effort at interpreter exit
            pass


atexit.register(_kill_all)


def _metadata_brokers(host: str, port: int, timeout: float) -> int:
    """Send a Metadata v1 request (all topics) and return the number of brokers in the answer.

    Hand-rolled on purpose (8 lines of wire format) so the harness needs no client library.
    """
    client_id = b"harness"
    body = struct.pack(">hhih", 3, 1, 7, len(client_id)) + client_id + struct.pack(">i", -1)
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(body)) + body)
        head = _recv_exact(s, 4)
        (size,) = struct.unpack(">i", head)
        data = _recv_exact(s, size)
    corr, n_brokers = struct.unpack_from(">ii", data, 0)
    if corr != 7:
        raise BrokerError(f"metadata answer with correlation id {corr}")
    return n_brokers


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed")
        buf += chunk
    return bytes(buf)


class _Running:
    """``with`` support: start on enter; stop cleanly on a normal exit, SIGKILL on an exception."""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.stop()
        else:
            self.kill()


class ZooKeeper(_Running):
    """A standalone ZooKeeper server for a ZooKeeper-mode broker (Kafka 3.x and older):
    ``org.apache.zookeeper.server.ZooKeeperServerMain`` from the ``zookeeper`` jar that Kafka's own
    pom depends on (3.6.4 for Kafka 3.5.2, resolved with the broker's jars), on 127.0.0.1 with a
    free port, data in ``workdir/data``, output in ``workdir/zookeeper.out``, no admin server.
    Ready once it answers the ``srvr`` four-letter word (the one ZooKeeper allows by default)."""

    def __init__(self, version: str, workdir: str | os.PathLike, *, heap: str = "128m",
                 start_timeout: float = 60.0) -> None:
        self.version = version
        self.workdir = Path(workdir).absolute()
        self.heap = heap
        self.start_timeout = start_timeout
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self._out = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def out_file(self) -> Path:
        return self.workdir / "zookeeper.out"

    def start(self) -> "ZooKeeper":
        if self.running:
            return self
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        cfg = self.workdir / "zoo.cfg"
        cfg.write_text(f"dataDir={self.workdir / 'data'}\nclientPort={self.port}\nclientPortAddress=127.0.0.1\n"
                       "tickTime=2000\nmaxClientCnxns=0\nadmin.enableServer=false\n")
        self._out = open(self.out_file, "ab")
        self.proc = subprocess.Popen(
            java_command(self.version, "org.apache.zookeeper.server.ZooKeeperServerMain", str(cfg), heap=self.heap,
                         log_level="warn"),
            stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir,
            preexec_fn=_child_setup())
        _LIVE.add(self)
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"ZooKeeper exited with {self.proc.returncode} during start:\n{self.log_tail()}")
            try:
                if self.four_letter_word("srvr").startswith("Zookeeper version"):
                    return self
            except OSError:
                pass
            time.sleep(0.2)
        self.kill()
        raise BrokerError(f"ZooKeeper not ready on {self.connect} after {self.start_timeout:.0f}s:\n{self.log_tail()}")

    def four_letter_word(self, word: str) -> str:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2.0) as s:
            s.sendall(word.encode())
            out = bytearray()
            while chunk := s.recv(4096):
                out += chunk
        return out.decode(errors="replace")

    def create(self, path: str, data: str = "") -> None:
        """Create znode ``path`` holding ``data`` with ZooKeeper's own CLI (``ZooKeeperMain``)."""
        cmd = java_command(self.version, "org.apache.zookeeper.ZooKeeperMain", "-server", self.connect, "create", path,
                           *([data] if data else []), heap="128m", log_level="warn")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if r.returncode != 0 or "Created " + path not in r.stdout + r.stderr:
            raise BrokerError(f"ZooKeeper create {path} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-2000:]}")

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._close()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self._close()

    def _close(self) -> None:
        _LIVE.discard(self)
        if self._out is not None:
            self._out.close()
            self._out = None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.out_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no ZooKeeper output)"


class KafkaBroker(_Running):
    """One KRaft node (``process.roles=broker,controller``, ``node.id=1`` unless told) in ``workdir``.

    ``workdir`` gets ``server.properties``, ``broker.out`` (stdout+stderr, SLF4J simple logger at
    ``log_level``) and ``data/`` (the log dir; the metadata log ``__cluster_metadata-0`` lives in
    it too because ``metadata.log.dir`` is not set). Ports are chosen once, so a stop/start pair
    reuses them. ``overrides`` are added to (and win over) the generated server properties;
    ``features`` are passed to ``kafka-storage format --feature name=level`` (4.x only, e.g.
    ``{"transaction.version": 1}``); ``release_version`` to ``--release-version``. ``node_id``,
    ``quorum_voters``, the ports and ``min_brokers`` (how many brokers a Metadata answer must list
    before the node counts as started) are set by :class:`KafkaCluster`; the defaults are a
    self-contained single node.

    ``zookeeper=True`` (Kafka 3.x only) runs the broker in ZooKeeper mode instead: ``broker.id``
    ``node_id``, no controller quorum and no ``kafka-storage format`` (the broker writes its
    version-0 ``meta.properties`` itself), against its own :class:`ZooKeeper` in
    ``workdir/zookeeper`` that is started before the broker and stopped after it. The cluster id
    is put into ZooKeeper (``/cluster/id``) before the first start, so it is ``cluster_id`` as in
    KRaft mode. The only mode that honours ``inter.broker.protocol.version`` below 3.0, and with it
    the topic config ``message.format.version`` (message formats 0 and 1).
    """

    def __init__(
        self,
        version: str,
        workdir: str | os.PathLike,
        overrides: Mapping[str, object] | None = None,
        *,
        features: Mapping[str, int] | None = None,
        release_version: str | None = None,
        cluster_id: str | None = None,
        heap: str = "512m",
        log_level: str = "info",
        start_timeout: float = 90.0,
        node_id: int = 1,
        quorum_voters: str | None = None,
        port: int | None = None,
        controller_port: int | None = None,
        min_brokers: int = 1,
        zookeeper: bool = False,
    ) -> None:
        self.version = version
        self.node_id = node_id
        self.zookeeper = ZooKeeper(version, Path(workdir).absolute() / "zookeeper") if zookeeper else None
        self.min_brokers = min_brokers
        self.workdir = Path(workdir).absolute()
        self.overrides = dict(overrides or {})
        self.features = dict(features or {})
        self.release_version = release_version
        self.cluster_id = cluster_id or cluster_id_for(str(self.workdir))
        self.heap = heap
        self.log_level = log_level
        self.start_timeout = start_timeout
        self.port = port or free_port()
        self.controller_port = controller_port or free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        #: ``controller.quorum.voters``; a single node is its own (only) voter
        self.quorum_voters = quorum_voters or f"{node_id}@127.0.0.1:{self.controller_port}"
        self.proc: subprocess.Popen | None = None
        self._out = None
        self.timings: dict[str, float] = {}

    # -- properties -----------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def metadata_log_dir(self) -> Path:
        """Where ``__cluster_metadata-0`` lives (``metadata.log.dir`` if overridden, else the log dir)."""
        md = self.overrides.get("metadata.log.dir")
        return Path(str(md)) if md else self.log_dir

    @property
    def properties_file(self) -> Path:
        return self.workdir / "server.properties"

    @property
    def out_file(self) -> Path:
        return self.workdir / "broker.out"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def server_properties(self) -> dict[str, str]:
        """The generated configuration (before ``overrides``), with the reason for each non-default."""
        if self.zookeeper is not None:
            props: dict[str, object] = {
                "broker.id": self.node_id,
                "zookeeper.connect": self.zookeeper.connect,
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            }
        else:
            props = {
                "process.roles": "broker,controller",
                "node.id": self.node_id,
                "controller.quorum.voters": self.quorum_voters,
                "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names": "CONTROLLER",
                "inter.broker.listener.name": "PLAINTEXT",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            }
        props.update({
            "log.dirs": str(self.log_dir),
            # one node: every replicated internal topic must be satisfied by a single replica
            "offsets.topic.replication.factor": 1,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "default.replication.factor": 1,
            "min.insync.replicas": 1,
            # fewer internal partitions than the default 50: far fewer (empty) dirs per capture
            "offsets.topic.num.partitions": 5,
            "transaction.state.log.num.partitions": 5,
            "num.partitions": 1,
            "auto.create.topics.enable": "false",
            "group.initial.rebalance.delay.ms": 0,
            # small preallocated indexes: a killed broker leaves the active segment's .index and
            # .timeindex at their preallocated size (default 10 MiB of zeros each)
            "log.index.size.max.bytes": 8192,
            "num.network.threads": 2,
            "num.io.threads": 2,
            "num.recovery.threads.per.data.dir": 1,
            "background.threads": 2,
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 2 * 1024 * 1024,
            "controlled.shutdown.enable": "true",
        })
        return {k: str(v) for k, v in props.items()}

    # -- lifecycle ------------------------------------------------------------------------------
    def _write_properties(self) -> None:
        props = self.server_properties()
        props.update({k: str(v) for k, v in self.overrides.items()})
        self.workdir.mkdir(parents=True, exist_ok=True)
        lines = [f"# generated by scripts/kafka/harness.py for Kafka {self.version}"]
        lines += [f"{k}={v}" for k, v in props.items()]
        self.properties_file.write_text("\n".join(lines) + "\n")

    def _java(self, main: str, *args: str) -> list[str]:
        return java_command(self.version, main, *args, heap=self.heap, log_level=self.log_level)

    def format(self) -> None:
        """``kafka-storage format`` (``kafka.tools.StorageTool`` in both 3.5 and 4.x) unless done;
        in ZooKeeper mode: the cluster id into a fresh ZooKeeper."""
        if self.zookeeper is not None:
            self.zookeeper.start()
            if not (self.zookeeper.workdir / "cluster-id-set").exists():
                self.zookeeper.create("/cluster")
                self.zookeeper.create("/cluster/id", json.dumps({"version": "1", "id": self.cluster_id},
                                                                separators=(",", ":")))
                (self.zookeeper.workdir / "cluster-id-set").write_text(self.cluster_id + "\n")
            return
        if (self.log_dir / "meta.properties").exists():
            return
        self._write_properties()
        args = ["format", "-t", self.cluster_id, "-c", str(self.properties_file)]
        if self.release_version:
            args += ["--release-version", self.release_version]
        for name, level in self.features.items():
            args += ["--feature", f"{name}={level}"]
        t0 = time.monotonic()
        r = subprocess.run(self._java("kafka.tools.StorageTool", *args), capture_output=True, text=True, timeout=120)
        self.timings["format_s"] = time.monotonic() - t0
        (self.workdir / "format.out").write_text(r.stdout + r.stderr)
        if r.returncode != 0:
            raise BrokerError(f"kafka-storage format failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")

    def start(self) -> "KafkaBroker":
        """Format if needed, start ``kafka.Kafka`` and wait until a Metadata request lists a broker
        (``min_brokers`` of them)."""
        if self.running:
            return self
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Format if needed and start the process without waiting (the nodes of a cluster must all be
        launched before any can become ready: the controller quorum needs a majority)."""
        if self.running:
            return
        self.format()
        self._write_properties()
        self._out = open(self.out_file, "ab")
        self._t0 = time.monotonic()
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(self.properties_file)),
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
            preexec_fn=_child_setup(),
        )
        _LIVE.add(self)

    def wait_ready(self, min_brokers: int | None = None) -> "KafkaBroker":
        """Wait until this node answers a Metadata request listing at least ``min_brokers`` brokers."""
        assert self.proc is not None, "launch() first"
        want = self.min_brokers if min_brokers is None else min_brokers
        t0 = getattr(self, "_t0", time.monotonic())
        deadline = t0 + self.start_timeout
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrokerError(f"Kafka {self.version} exited with {self.proc.returncode} during start:\n{self.log_tail()}")
            try:
                if _metadata_brokers("127.0.0.1", self.port, timeout=2.0) >= want:
                    self.timings["start_s"] = time.monotonic() - t0
                    return self
            except (OSError, ConnectionError, struct.error, BrokerError) as e:
                last_err = e
            time.sleep(0.2)
        self.kill()
        raise BrokerError(
            f"Kafka {self.version} not ready on {self.bootstrap} after {self.start_timeout:.0f}s "
            f"(last error: {last_err!r}):\n{self.log_tail()}"
        )

    def stop(self, timeout: float = 60.0) -> None:
        """Clean shutdown (SIGTERM, like ``kafka-server-stop.sh``); SIGKILL if it takes too long."""
        self.terminate()
        self.wait_stopped(timeout)

    def terminate(self) -> None:
        """Send SIGTERM (the start of a clean shutdown) without waiting."""
        if self.proc is not None and self.proc.poll() is None:
            self._stop_t0 = time.monotonic()
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float = 60.0) -> None:
        """Wait for the process sent SIGTERM by :meth:`terminate`; SIGKILL it after ``timeout``."""
        if self.proc is None:
            return
        if self.proc.poll() is None or hasattr(self, "_stop_t0"):
            t0 = getattr(self, "_stop_t0", time.monotonic())
            try:
                self.proc.wait(timeout=max(0.0, timeout - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                self.kill()
                raise BrokerError(f"Kafka {self.version} did not stop within {timeout}s; killed:\n{self.log_tail()}")
            self.timings["stop_s"] = time.monotonic() - t0
            self.__dict__.pop("_stop_t0", None)
        self._close()

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks, no index trimming, no final snapshots or checkpoints."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - kernel did not reap it
                pass
        self._close()

    def restart(self) -> "KafkaBroker":
        self.stop()
        return self.start()

    def _close(self) -> None:
        _LIVE.discard(self)
        if self._out is not None:
            self._out.close()
            self._out = None
        if self.zookeeper is not None:  # the broker is gone: its ZooKeeper goes too
            self.zookeeper.stop()

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.out_file.read_text(errors="replace").splitlines()
        except OSError:
            return "(no broker output)"
        tail = text[-lines:]
        if self.zookeeper is not None:
            tail += ["--- zookeeper ---", *self.zookeeper.log_tail(lines // 3).splitlines()]
        return "\n".join(tail)


    def __del__(self) -> None:  # last resort; atexit normally handles it
        try:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
        except Exception:  # noqa: BLE001
            pass


class KafkaCluster(_Running):
    """``n`` KRaft nodes on 127.0.0.1, each ``process.roles=broker,controller``, node ids 1..n, one
    static controller quorum of all ``n`` voters (``controller.quorum.voters``), in
    ``workdir/node-<id>/`` (each a :class:`KafkaBroker` with its own ``server.properties``,
    ``broker.out`` and ``data/`` log dir, the metadata log inside it).

    ``overrides`` apply to every node (after the replication defaults below), ``node_overrides``
    ``{node_id: {...}}`` to one node only. Replication defaults for ``n >= 3``: internal topics
    with replication factor 3 and ``min.insync.replicas`` 2 (``transaction.state.log.min.isr`` 2),
    ``default.replication.factor`` 3. ``heap`` is per node (three JVMs share the machine).

    Nodes can be stopped, SIGKILLed and started again one at a time (``cluster.nodes[i]``); a
    restarted node keeps its ports and log dir, and :meth:`restart_node` can change its overrides.
    :meth:`stop` shuts all running nodes down cleanly *together*: each sends SIGTERM at the same
    time, so the quorum keeps its majority while every broker does its controlled shutdown (stopped
    one after another, the last node would be left without a quorum majority for its own).
    """

    def __init__(
        self,
        version: str,
        workdir: str | os.PathLike,
        n: int = 3,
        overrides: Mapping[str, object] | None = None,
        node_overrides: Mapping[int, Mapping[str, object]] | None = None,
        *,
        features: Mapping[str, int] | None = None,
        release_version: str | None = None,
        cluster_id: str | None = None,
        heap: str = "384m",
        log_level: str = "info",
        start_timeout: float = 120.0,
    ) -> None:
        self.version = version
        self.workdir = Path(workdir).absolute()
        self.n = n
        self.cluster_id = cluster_id or cluster_id_for(str(self.workdir))
        used: set[int] = set()

        def port() -> int:
            while True:
                p = free_port()
                if p not in used:
                    used.add(p)
                    return p

        ports = {i: (port(), port()) for i in range(1, n + 1)}
        voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in ports.items())
        rf = min(n, 3)
        self.common_overrides: dict[str, object] = {
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min(rf, 2),
            "default.replication.factor": rf,
            "min.insync.replicas": min(rf, 2),
        }
        self.common_overrides.update(overrides or {})
        self.node_overrides = {int(k): dict(v) for k, v in (node_overrides or {}).items()}
        self.nodes: dict[int, KafkaBroker] = {}
        for i, (p, c) in ports.items():
            ov = dict(self.common_overrides)
            ov.update(self.node_overrides.get(i, {}))
            self.nodes[i] = KafkaBroker(version, self.workdir / f"node-{i}", ov, features=features,
                                        release_version=release_version, cluster_id=self.cluster_id, heap=heap,
                                        log_level=log_level, start_timeout=start_timeout, node_id=i,
                                        quorum_voters=voters, port=p, controller_port=c, min_brokers=n)
        self.timings: dict[str, float] = {}
        self.killed_without_quorum: list[int] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.nodes.values())

    @property
    def running(self) -> bool:
        return any(b.running for b in self.nodes.values())

    def log_dirs(self) -> dict[int, Path]:
        return {i: b.log_dir for i, b in self.nodes.items()}

    def server_properties(self) -> dict[str, str]:
        """The generated configuration shared by all nodes (node 1's, without node-only overrides)."""
        props = self.nodes[min(self.nodes)].server_properties()
        props.pop("node.id", None)
        return props

    def start(self) -> "KafkaCluster":
        """Launch every node that is not running, then wait until each lists all ``n`` brokers."""
        t0 = time.monotonic()
        for b in self.nodes.values():
            b.launch()
        for b in self.nodes.values():
            b.wait_ready()
        self.timings["start_s"] = time.monotonic() - t0
        return self

    def start_node(self, node_id: int, min_brokers: int | None = None) -> KafkaBroker:
        """(Re)start one node and wait until it answers with ``min_brokers`` (default all) brokers."""
        b = self.nodes[node_id]
        b.launch()
        return b.wait_ready(min_brokers)

    def restart_node(self, node_id: int, overrides: Mapping[str, object] | None = None, *,
                     kill: bool = False) -> KafkaBroker:
        """Stop (clean, or SIGKILL with ``kill``) one node, apply ``overrides`` to it, start it again."""
        b = self.nodes[node_id]
        b.kill() if kill else b.stop()
        if overrides:
            self.node_overrides.setdefault(node_id, {}).update(overrides)
            b.overrides.update(overrides)
        return self.start_node(node_id)

    #: How long a node may go on after the quorum lost its majority (its peers exited) before it is
    #: SIGKILLed: its controlled shutdown waits for a controller that cannot be elected any more
    #: (``BrokerServer.shutdown`` gives up only after 5 minutes, then shuts down as usual).
    QUORUMLESS_GRACE_S = 30.0

    def stop(self, timeout: float = 120.0) -> None:
        """Clean shutdown of every running node, all SIGTERMed at once (see the class doc).

        A node still running once fewer than a majority of voters are left cannot have its controlled
        shutdown approved; after :data:`QUORUMLESS_GRACE_S` it is SIGKILLed (its id kept in
        :attr:`killed_without_quorum`), not reported as an error: its log is then recovered
        at its next start, as after any unclean stop. A node that overruns ``timeout`` while a
        quorum is still there is an error."""
        t0 = time.monotonic()
        running = [b for b in self.nodes.values() if b.running]
        for b in running:
            b.terminate()
        majority = self.n // 2 + 1
        lost_at: float | None = None
        killed: list[int] = []
        errors = []
        while True:
            left = [(i, b) for i, b in self.nodes.items() if b.running]
            now = time.monotonic()
            if not left:
                break
            if len(left) < majority and lost_at is None:
                lost_at = now
            if lost_at is not None and now - lost_at > self.QUORUMLESS_GRACE_S:
                for i, b in left:
                    b.kill()
                    killed.append(i)
                break
            if now - t0 > timeout:
                for _, b in left:
                    b.kill()
                    errors.append(f"Kafka {self.version} did not stop within {timeout}s; killed:\n{b.log_tail()}")
                break
            time.sleep(0.2)
        for b in running:
            b.wait_stopped(timeout)
        for b in self.nodes.values():
            b._close()
        self.timings["stop_s"] = time.monotonic() - t0
        self.killed_without_quorum = killed
        if errors:
            raise BrokerError("\n\n".join(errors))

    def kill(self) -> None:
        for b in self.nodes.values():
            b.kill()

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(f"--- node {i} ---\n{b.log_tail(lines)}" for i, b in self.nodes.items())



class JavaProducer:
    """Kafka's own Java producer (from the broker's jars), driven line by line from Python.

    Only the Java client of Kafka 4.x uses transaction version 2 (EndTxn v5, implicit partition
    registration, epoch bump per transaction). Each reply is a dict with the client's current
    ``producer_id`` / ``producer_epoch`` / ``tv2`` flag; ``flush()`` returns the offsets of the
    records sent since the last flush, as the client's futures reported them.
    """

    SOURCE = Path(__file__).resolve().parent / "java" / "ProducerBridge.java"

    def __init__(self, version: str, config: Mapping[str, object], *, timeout: float = 60.0,
                 log_file: str | os.PathLike | None = None) -> None:
        self.timeout = timeout
        self.config = dict(config)
        self.transactional_id = self.config.get("transactional.id")
        args = ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                "-Dlog4j2.configurationFile=" + str(Path(__file__).resolve().parent / "log4j" / "log4j2.properties"),
                "-cp", classpath(version), str(self.SOURCE)]
        args += [f"{k}={v}" for k, v in config.items()]
        self.log_file = log_file
        self._err = open(log_file, "ab") if log_file else subprocess.DEVNULL
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err,
                                     text=True, bufsize=1, preexec_fn=_child_setup())
        self.state = self._read()

    def _read(self) -> dict:
        import select

        assert self.proc.stdout is not None
        r, _, _ = select.select([self.proc.stdout], [], [], self.timeout)
        if not r:
            self.proc.kill()
            raise BrokerError(f"Java producer bridge silent for {self.timeout}s")
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            tail = ""
            if self.log_file is not None:
                self._err.flush()
                tail = "\n".join(Path(self.log_file).read_text(errors="replace").splitlines()[-20:])
            raise BrokerError(f"Java producer bridge exited ({code}); it needs a JDK (the source launcher "
                              f"compiles ProducerBridge.java), not only a JRE:\n{tail}")
        return json.loads(line)

    def call(self, *words: object, check: bool = True) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(" ".join(str(w) for w in words) + "\n")
        self.proc.stdin.flush()
        self.state = self._read()
        if check and not self.state.get("ok"):
            raise BrokerError(f"Java producer: {' '.join(map(str, words))}: {self.state.get('error')}")
        return self.state

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("close", check=False)
                self.proc.wait(timeout=30)
            except (BrokerError, OSError, subprocess.TimeoutExpired, ValueError):
                self.proc.kill()
        if self._err not in (None, subprocess.DEVNULL):
            self._err.close()


class RawConnection:
    """One TCP connection speaking Kafka's protocol through kafka-python's protocol classes.

    For requests no well-behaved client sends (a transactional produce after the abort marker, or to
    a partition never added to the transaction) and for bulk InitProducerId calls. Encoding and
    decoding are kafka-python's own (``ApiMessage.encode``/``decode``), not ours.
    """

    def __init__(self, bootstrap: str, *, timeout: float = 15.0, client_id: str = "txn-audit-capture") -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(timeout)
        self.client_id = client_id
        self.correlation_id = 0

    def call(self, request, version: int):
        from kafka.protocol.api_header import ResponseClassRegistry  # noqa: F401 - registers classes

        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id=self.client_id)
        self.sock.sendall(bytes(request.encode(version=version, header=True, framed=True)))
        (size,) = struct.unpack(">i", _recv_exact(self.sock, 4))
        payload = _recv_exact(self.sock, size)
        response = request.header.get_response_class().decode(payload, header=True)
        if response.header.correlation_id != self.correlation_id:
            raise BrokerError(f"correlation id {response.header.correlation_id} != {self.correlation_id}")
        return response

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def raw_request(bootstrap: str, request, version: int, *, timeout: float = 15.0):
    """One request on a fresh :class:`RawConnection`; returns kafka-python's decoded response."""
    with RawConnection(bootstrap, timeout=timeout) as conn:
        return conn.call(request, version)


if __name__ == "__main__":  # manual smoke test: python scripts/kafka/harness.py 4.3.1 /tmp/k
    import tempfile

    v = sys.argv[1] if len(sys.argv) > 1 else NEWEST
    wd = sys.argv[2] if len(sys.argv) > 2 else tempfile.mkdtemp(prefix=f"kafka-{v}-")
    b = KafkaBroker(v, wd)
    b.start()
    print(f"Kafka {v} up on {b.bootstrap} in {b.timings['start_s']:.1f}s; log dir {b.log_dir}")
    b.stop()
    print(f"stopped in {b.timings.get('stop_s', 0):.1f}s")
