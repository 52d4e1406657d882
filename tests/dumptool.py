"""Run Kafka's own DumpLogSegments and parse its text output.

Used by the differential (parity) tests: our decoders against Kafka's dump tool
on the same files. The parser knows the 4.x text layout (4.3.1 and 4.4.0):
``Dumping <path>`` starts a file; batch lines are ``key: value`` pairs; record
lines start with ``| ``; decoder payloads are JSON.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from conftest import PROJECT
from scripts.kafka.harness import NEWEST

#: the default tool version; ``run_dump(..., version=...)`` takes any fetched one (4.4.0 prints the
#: same text layout as 4.3.1 for every file kind compared here)
KAFKA_VERSION = NEWEST
MAIN = "org.apache.kafka.tools.DumpLogSegments"


def kafka_libs(version: str = KAFKA_VERSION) -> Path:
    """Jars from Maven Central via the project's own fetch script (cached after the first run)."""
    out = subprocess.run(["bash", str(PROJECT / "scripts" / "kafka" / "fetch.sh"), version],
                         check=True, capture_output=True, text=True, timeout=900)
    return Path(out.stdout.strip().splitlines()[-1])


def run_dump(files: list[Path], *flags: str, version: str = KAFKA_VERSION, chunk: int = 200) -> str:
    libs = kafka_libs(version)
    texts = []
    for i in range(0, len(files), chunk):
        part = files[i : i + chunk]
        assert not any("," in str(p) for p in part), "the dump tool splits --files at commas"
        proc = subprocess.run(
            ["java", "-Xmx512m", "-cp", f"{libs}/*", MAIN, *flags, "--files", ",".join(map(str, part))],
            capture_output=True, text=True, timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        texts.append(proc.stdout)
    return "".join(texts)


@dataclass
class DumpedFile:
    path: str
    batches: list[dict] = field(default_factory=list)  # each with "records": [...]
    entries: list[dict] = field(default_factory=list)  # snapshot / index / txnindex lines
    other: list[str] = field(default_factory=list)  # lines we did not recognise


_BATCH_KEYS = re.compile(
    r"(baseOffset|lastOffset|offset|count|baseSequence|lastSequence|producerId|producerEpoch|partitionLeaderEpoch|"
    r"isTransactional|isControl|deleteHorizonMs|position|CreateTime|LogAppendTime|NoTimestampType|size|magic|"
    r"compresscodec|crc|isvalid): (\S+)"
)
_RECORD_HEAD = re.compile(
    r"^\| offset: (?P<offset>-?\d+) (?P<tstype>CreateTime|LogAppendTime|NoTimestampType): (?P<ts>-?\d+) "
    r"keySize: (?P<keySize>-?\d+) valueSize: (?P<valueSize>-?\d+)(?: sequence: (?P<sequence>-?\d+) "
    r"headerKeys: \[(?P<headerKeys>[^\]]*)\])?"
)
_ENTRY_KV = re.compile(r"(\w+): (OptionalLong\[(-?\d+)\]|OptionalLong\.empty|-?\d+)")


def _scalar(v: str):
    if v in ("true", "false"):
        return v == "true"
    if v == "OptionalLong.empty":
        return None
    m = re.fullmatch(r"OptionalLong\[(-?\d+)\]", v)
    if m:
        return int(m.group(1))
    try:
        return int(v)
    except ValueError:
        return v


def _split_json_tail(rest: str) -> dict:
    """`` key: {...} payload: {...}`` / `` endTxnMarker: COMMIT coordinatorEpoch: 0`` / ``LeaderChange: {...}``."""
    out: dict = {}
    m = re.search(r" endTxnMarker: (\w+) coordinatorEpoch: (-?\d+)", rest)
    if m:
        out["endTxnMarker"], out["coordinatorEpoch"] = m.group(1), int(m.group(2))
        return out
    dec = json.JSONDecoder()
    for label in ("key", "payload"):
        i = rest.find(f" {label}: ")
        if i >= 0:
            start = i + len(label) + 3
            if rest.startswith("<DELETE>", start):
                out[label] = "<DELETE>"
                continue
            try:
                out[label], _ = dec.raw_decode(rest, start)
            except json.JSONDecodeError:
                out[label] = rest[start:]
    m = re.search(r" (LeaderChange|SnapshotHeader|SnapshotFooter|KRaftVersion|KRaftVoters): ", rest)
    if m:
        out["controlRecord"] = m.group(1)
        out["controlJson"], _ = dec.raw_decode(rest, m.end())
    m = re.search(r" controlType: (\S+)", rest)
    if m:
        out["controlType"] = m.group(1)
    return out


def parse(text: str) -> dict[str, DumpedFile]:
    files: dict[str, DumpedFile] = {}
    cur: DumpedFile | None = None
    for line in text.splitlines():
        if line.startswith("Dumping "):
            cur = files.setdefault(line[len("Dumping "):].strip(), DumpedFile(line[len("Dumping "):].strip()))
            continue
        if cur is None or not line.strip() or line.startswith(("Log starting offset:", "Snapshot end offset:", "KRaft bootstrap snapshot")):
            continue
        if line.startswith("| "):
            m = _RECORD_HEAD.match(line)
            if not m:
                cur.other.append(line)
                continue
            rec = {k: (int(v) if v is not None and re.fullmatch(r"-?\d+", v) else v) for k, v in m.groupdict().items()}
            rec.update(_split_json_tail(line[m.end():]))
            cur.batches[-1]["records"].append(rec)
        elif line.startswith("baseOffset: ") or (line.startswith("offset: ") and " position: " in line and "magic" in line):
            b = {k: _scalar(v) for k, v in _BATCH_KEYS.findall(line)}
            b["records"] = []
            cur.batches.append(b)
        elif line.startswith(("producerId: ", "offset: ", "timestamp: ", "version: ")):
            cur.entries.append({k: (int(c) if c else _scalar(v)) for k, v, c in _ENTRY_KV.findall(line)})
        else:
            cur.other.append(line)
    return files
