"""The broker as oracle: what Kafka's own log-loading code makes of partition directories, offline.

``scripts/kafka/java/LogStateOracle.java`` (run by the JDK's source launcher on the jars that
``scripts/kafka/fetch.sh`` resolves, like ``ProducerBridge.java``) copies each partition directory to a
temporary log dir, loads the copy with ``UnifiedLog.create`` (``LogLoader`` + ``ProducerStateManager``
of Kafka 4.3.1, or 4.4.0 with ``version=KAFKA_4_4``: segment recovery after an unclean shutdown,
producer-snapshot loading and rebuilding, transaction index), applies the high watermark the broker would read from
``replication-offset-checkpoint``, and reports log start / end offsets, high watermark, first unstable
offset, last stable offset, segments and the producer state. No broker process, no KRaft quorum; the
inputs are only read.

* :func:`load_partitions` — one JVM for any number of requests (start-up and compiling the source
  cost about 2 s; each partition then takes milliseconds).
* :func:`requests_for_log_dirs` — one request per live partition directory of broker log dirs, with
  the clean-shutdown flag and the offsets a broker would read from the log dir's checkpoints.

Request (one JSON object; unknown keys are ignored, ``id`` is echoed back)::

    {"dir": str, "topic": str, "partition": int, "clean_shutdown": bool,
     "recovery_point": int|None, "log_start_offset": int|None, "high_watermark": int|None,
     "now_ms": int, "producer_id_expiration_ms": int = 86400000, "max_transaction_timeout_ms": int = 900000,
     "log_config": {str: str} = {}}

``None`` offsets mean "not in the checkpoint": recovery point and log start offset then are 0 (the
broker's ``getOrElse(0L)``) and no high watermark is applied (it stays at the log start offset, as in
``UnifiedLog``'s constructor). ``log_config`` overrides topic configs of the default ``LogConfig``
(only index sizes and the like matter for loading).

Response (one per request, same order)::

    {"id", "dir", "topic", "partition",
     "log_start_offset": int, "log_end_offset": int, "high_watermark": int,
     "first_unstable_offset": int|None,     # UnifiedLog.firstUnstableOffset() after the HW update
     "last_stable_offset": int,             # UnifiedLog.lastStableOffset()
     "recovery_point": int,                 # after loading (log end offset after a recovery)
     "segments": [base offsets, ascending],
     "producers": [{"producer_id", "producer_epoch", "coordinator_epoch", "first_sequence", "last_sequence",
                    "last_data_offset", "current_txn_first_offset": int|None, "last_timestamp",
                    "batches": [{"first_sequence", "last_sequence", "first_offset", "last_offset", "timestamp"}]}],
                                            # ProducerStateManager.activeProducers(), by producer id
     "ongoing_transactions": [{"producer_id", "first_offset", "last_offset": None}],   # by first offset
     "unreplicated_transactions": [{"producer_id", "first_offset", "last_offset"}],    # completed above the HW
     "latest_snapshot_offset": int|None,
     "files_changed_by_load": {"deleted": [names], "created": [names], "modified": ["name (what)"]},
     "scheduled_tasks": [str],              # what the log scheduled; only immediate one-shot tasks ran
     "skipped_entries": [names],            # non-regular entries of dir that were not copied
     "error": None | "<exception class>: <message>"}   # then every other field is None
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterable

from scripts.kafka.harness import NEWEST, classpath

PROJECT = Path(__file__).resolve().parents[1]
SOURCE = PROJECT / "scripts" / "kafka" / "java" / "LogStateOracle.java"
LOG4J2 = PROJECT / "scripts" / "kafka" / "log4j" / "log4j2.properties"

#: partition directory names a broker loads as live replicas: ``<topic>-<n>``
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>0|[1-9][0-9]*)$")
_RETIRED_SUFFIXES = ("-delete", "-stray", "-future")
METADATA_DIR = "__cluster_metadata-0"


class OracleError(RuntimeError):
    """The oracle JVM could not run, or answered something other than one JSON line per request."""


def java_command(version: str = NEWEST, *, heap: str = "512m", tmp_dir: str | os.PathLike | None = None) -> list[str]:
    """The java command line (as harness.JavaProducer builds ProducerBridge's); fetches jars if missing.

    ``tmp_dir`` becomes ``java.io.tmpdir``, where the per-request copies are made (default /tmp).
    """
    return [
        "java", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true",
        *([f"-Djava.io.tmpdir={tmp_dir}"] if tmp_dir is not None else []),
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-Dorg.slf4j.simpleLogger.logFile=System.err",
        "-Dlog4j2.configurationFile=" + str(LOG4J2),
        "-cp", classpath(version),  # harness.libs_dir: scripts/kafka/fetch.sh when the jars are missing
        str(SOURCE),
    ]


def _jsonable(req: dict) -> dict:
    return {k: (str(v) if isinstance(v, os.PathLike) else v) for k, v in req.items()}


def load_partitions(requests: list[dict], *, version: str = NEWEST, timeout: float = 900.0,
                    stderr_file: str | os.PathLike | None = None,
                    tmp_dir: str | os.PathLike | None = None) -> list[dict]:
    """Run the oracle once over ``requests``; one response dict per request, in order.

    Each request's ``id`` is replaced by its index (the answers are checked against it).

    Per-request failures come back in ``"error"``; a JVM that fails to start, dies, or answers
    malformed output raises :class:`OracleError` with the tail of its stderr. The JVM's stderr (SLF4J
    warnings of the loader, e.g. about recovering segments) goes to ``stderr_file`` when given.
    """
    if not requests:
        return []
    lines = []
    for i, req in enumerate(requests):
        r = _jsonable(req)
        r["id"] = i
        lines.append(json.dumps(r))
    cmd = java_command(version, tmp_dir=tmp_dir)
    with tempfile.TemporaryFile() if stderr_file is None else open(stderr_file, "w+b") as err:
        try:
            proc = subprocess.run(cmd, input=("\n".join(lines) + "\n").encode(), stdout=subprocess.PIPE,
                                  stderr=err, timeout=timeout)
        except FileNotFoundError as e:
            raise OracleError(f"cannot run java ({e}); the oracle needs a JDK 17 (source launcher)") from e
        except subprocess.TimeoutExpired as e:
            raise OracleError(f"LogStateOracle did not finish {len(requests)} requests within {timeout:.0f}s") from e
        err.seek(0)
        tail = err.read()[-4000:].decode(errors="replace")
    if proc.returncode != 0:
        raise OracleError(f"LogStateOracle exited with {proc.returncode} (it needs a JDK, not only a JRE):\n{tail}")
    out = [line for line in proc.stdout.decode().splitlines() if line.strip()]
    try:
        answers = [json.loads(line) for line in out]
    except json.JSONDecodeError as e:
        raise OracleError(f"LogStateOracle wrote a non-JSON line ({e}):\n{proc.stdout[-2000:]!r}\n{tail}") from e
    if [a.get("id") for a in answers] != list(range(len(requests))):
        raise OracleError(f"LogStateOracle answered {len(answers)} lines for {len(requests)} requests "
                          f"(ids {[a.get('id') for a in answers][:20]}):\n{tail}")
    return answers


# -- requests from broker log dirs ------------------------------------------------------------------

def _offset_checkpoint(path: Path) -> tuple[dict[tuple[str, int], int], str | None]:
    """``{(topic, partition): offset}`` of a log-dir checkpoint, and a note when it is missing/corrupt.

    A broker treats a missing file as empty, and LogManager logs and ignores an unreadable
    recovery-point / log-start-offset checkpoint; the note records that it happened.
    """
    from auditor.errors import DecodeError
    from auditor.formats.checkpoints import checkpoint_kind, read_offset_checkpoint

    if not path.is_file():
        return {}, f"{path.name} missing"
    try:
        rows = read_offset_checkpoint(path.read_bytes(), checkpoint_kind(path.name))
    except DecodeError as e:
        return {}, f"{path.name} unreadable ({e}); treated as empty"
    return {(r["topic"], r["partition"]): r["offset"] for r in rows}, None


def _newest_batch_timestamp(log_file: Path) -> int | None:
    """The largest batch max timestamp of a segment, walking batch headers only (magic 2, and 1).

    Stops at the first header that does not fit the file (a crash's torn tail or preallocated zeros).
    """
    best: int | None = None
    try:
        size = log_file.stat().st_size
        with open(log_file, "rb") as f:
            pos = 0
            while pos + 17 <= size:
                f.seek(pos)
                head = f.read(43)
                if len(head) < 17:
                    break
                length = struct.unpack_from(">i", head, 8)[0]
                magic = head[16]
                if length < 14 or pos + 12 + length > size:
                    break
                ts = None
                if magic == 2 and len(head) >= 43:
                    ts = struct.unpack_from(">q", head, 35)[0]  # maxTimestamp
                elif magic == 1 and len(head) >= 26:
                    ts = struct.unpack_from(">q", head, 18)[0]  # the (wrapper) message's timestamp
                if ts is not None and ts >= 0 and (best is None or ts > best):
                    best = ts
                pos += 12 + length
    except OSError:
        return best
    return best


def _partition_dirs(log_dir: Path) -> list[tuple[Path, str, int]]:
    out = []
    for d in sorted(log_dir.iterdir()):
        if not d.is_dir() or d.name == METADATA_DIR or d.name.endswith(_RETIRED_SUFFIXES):
            continue
        m = _PARTITION_DIR.match(d.name)
        if m:
            out.append((d, m["topic"], int(m["partition"])))
    return out


def log_dir_now_ms(log_dir: Path) -> tuple[int, str]:
    """The "now" of an offline log dir, and where it came from.

    Choice: the newest batch max timestamp over every segment of the log dir, ``__cluster_metadata-0``
    included (a KRaft node appends a NoOpRecord every 500 ms, so its metadata log ends within a second of
    the shutdown or crash). File mtimes are the fallback only — a git checkout or copy resets them (all
    files of sample_logs/ carry the checkout time). Producer expiration on snapshot load (entries whose
    last timestamp is older than now - producer_id_expiration_ms are dropped) depends on this.
    """
    best = None
    dirs = [d for d, _, _ in _partition_dirs(log_dir)]
    if (log_dir / METADATA_DIR).is_dir():
        dirs.append(log_dir / METADATA_DIR)
    for d in dirs:
        for seg in d.glob("*.log"):
            ts = _newest_batch_timestamp(seg)
            if ts is not None and (best is None or ts > best):
                best = ts
    if best is not None:
        return best, "newest batch max timestamp"
    mtimes = [p.stat().st_mtime_ns // 1_000_000 for p in log_dir.rglob("*") if p.is_file()]
    return (max(mtimes) if mtimes else 0), "newest file mtime (no batch with a timestamp)"


def _log_dirs(paths: Iterable[str | os.PathLike]) -> list[Path]:
    out = []
    for p in map(Path, paths):
        if (p / "meta.properties").is_file():
            out.append(p)
            continue
        below = sorted(c for c in p.iterdir() if (c / "meta.properties").is_file()) if p.is_dir() else []
        if not below:
            raise ValueError(f"{p} is not a broker log dir (no meta.properties) and holds none")
        out.extend(below)
    return out


def requests_for_log_dirs(paths: Iterable[str | os.PathLike], *, now_ms: int | None = None,
                          producer_id_expiration_ms: int = 86_400_000,
                          max_transaction_timeout_ms: int = 900_000) -> list[dict]:
    """One request per live partition directory of the broker log dirs ``paths``.

    A path is a log dir (it holds ``meta.properties``) or a directory whose children are log dirs.
    ``__cluster_metadata-0`` and ``-delete`` / ``-stray`` / ``-future`` dirs are skipped.
    ``clean_shutdown``: the log dir holds ``.kafka_cleanshutdown``. ``recovery_point``,
    ``log_start_offset`` and ``high_watermark`` come from ``recovery-point-offset-checkpoint``,
    ``log-start-offset-checkpoint`` and ``replication-offset-checkpoint`` (None when the partition is
    not listed). ``now_ms``: given, or :func:`log_dir_now_ms` per log dir. Extra keys (ignored by the
    oracle): ``log_dir``, ``now_source`` and ``notes`` (missing / unreadable checkpoints).
    """
    requests = []
    for log_dir in _log_dirs(paths):
        rec, n1 = _offset_checkpoint(log_dir / "recovery-point-offset-checkpoint")
        lso, n2 = _offset_checkpoint(log_dir / "log-start-offset-checkpoint")
        hw, n3 = _offset_checkpoint(log_dir / "replication-offset-checkpoint")
        notes = [n for n in (n1, n2, n3) if n]
        clean = (log_dir / ".kafka_cleanshutdown").is_file()
        if now_ms is None:
            now, source = log_dir_now_ms(log_dir)
        else:
            now, source = now_ms, "given"
        for d, topic, partition in _partition_dirs(log_dir):
            key = (topic, partition)
            requests.append({
                "dir": str(d), "topic": topic, "partition": partition, "clean_shutdown": clean,
                "recovery_point": rec.get(key), "log_start_offset": lso.get(key), "high_watermark": hw.get(key),
                "now_ms": now, "producer_id_expiration_ms": producer_id_expiration_ms,
                "max_transaction_timeout_ms": max_transaction_timeout_ms,
                "log_dir": str(log_dir), "now_source": source, "notes": notes,
            })
    return requests


if __name__ == "__main__":  # PYTHONPATH=. python tests/kafka_oracle.py LOGDIR... : one JSON line per partition
    for answer in load_partitions(requests_for_log_dirs(sys.argv[1:])):
        print(json.dumps(answer))
