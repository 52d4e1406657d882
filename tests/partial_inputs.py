"""Scans of *parts* of the sample captures, against the scan of the whole capture.

For every scenario of ``sample_logs/`` with a finding, the inputs a user would hand
over instead of the whole log dirs: (a) each partition directory holding a finding,
alone; (b) the segment (``.log``) holding the finding's first offset, alone. Each
is ingested and audited on its own (inputs of different clusters share one run:
rules never compare across clusters).

Used by ``tests/test_partial_inputs.py`` and, for the before/after table of an
issue note, runnable: ``python tests/partial_inputs.py`` prints it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from conftest import SAMPLE_LOGS

RANK = {"info": 0, "warning": 1, "error": 2, "critical": 3}


def scenarios() -> list[Path]:
    out = []
    for p in sorted(SAMPLE_LOGS.glob("*/expected.json")):
        exp = json.loads(p.read_text()).get("expect")
        if exp and exp.get("anomalies"):
            out.append(p.parent)
    return out


def key(f: dict) -> tuple:
    return (f["rule"], f.get("topic"), f.get("partition"), f.get("producer_id"))


@dataclass
class Run:
    scenario: str
    label: str  # "partition-dir" | "segment"
    path: Path
    topic: str
    partition: int
    findings: list[dict] = field(default_factory=list)


def segment_of(part_dir: Path, offset: int) -> Path | None:
    """The live segment holding ``offset``: the one with the largest base offset at or below it."""
    segs = sorted((int(p.name[:20]), p) for p in part_dir.glob("*.log") if p.name[:20].isdigit())
    best = [p for b, p in segs if b <= offset]
    return best[-1] if best else None


def _cluster(scenario: Path) -> str:
    from auditor.formats.checkpoints import read_meta_properties

    return read_meta_properties(next(scenario.glob("*/meta.properties")).read_bytes())["cluster_id"]


def _audit(spark, tmp: Path, inputs: list[str], name: str) -> list[dict]:
    from auditor.engine.runner import audit
    from auditor.ingest.spark_job import ingest

    out = tmp / name
    ingest(spark, inputs, str(out))
    return audit(spark, str(out)).findings


def run_all(spark, tmp: Path) -> tuple[dict[str, list[dict]], list[Run]]:
    """Whole-capture findings per scenario, and the partial runs with theirs."""
    # a tiered capture's whole input holds its remote store, which no part of a broker log dir holds. Its
    # partition directory alone shows the log is tiered (its leader-epoch checkpoint starts below its first
    # local segment: rules/unknown_producer_gap.py, earlier-batches-tiered, info) and is held to the contract.
    # A lone segment shows neither where the log starts nor that it is tiered: its producers' earlier
    # sequences are honestly undetermined (a warning the whole, which replays the remote store, has no
    # reason to raise), so the segment runs of tiered captures are left out
    scs = scenarios()
    whole: dict[str, list[dict]] = {}
    # whole captures: different clusters in one run (a mutated capture shares its source's id)
    groups: list[dict[str, Path]] = []
    for s in scs:
        c = _cluster(s)
        g = next((g for g in groups if c not in g), None)
        if g is None:
            groups.append(g := {})
        g[c] = s
    for i, g in enumerate(groups):
        for f in _audit(spark, tmp, [str(s) for s in g.values()], f"whole{i}"):
            whole.setdefault(g[f["cluster_id"]].name, []).append(f)
    runs: list[Run] = []
    for s in scs:
        seen_dirs, seen_segs = set(), set()
        for f in whole.get(s.name, []):
            if f.get("topic") is None or f.get("partition") is None or f.get("broker_id") is None:
                continue
            d = s / f"broker-{f['broker_id']}" / f"{f['topic']}-{f['partition']}"
            if not d.is_dir():
                continue
            if d not in seen_dirs:
                seen_dirs.add(d)
                runs.append(Run(s.name, "partition-dir", d, f["topic"], f["partition"]))
            seg = segment_of(d, f["first_offset"]) if f.get("first_offset") is not None else None
            if (s / "remote-store").is_dir():
                seg = None
            if seg is not None and seg not in seen_segs:
                seen_segs.add(seg)
                runs.append(Run(s.name, "segment", seg, f["topic"], f["partition"]))
    # partial runs of different clusters together, one cluster's part per run
    batches: list[dict[str, Run]] = []
    for r in runs:
        c = _cluster(SAMPLE_LOGS / r.scenario)
        b = next((b for b in batches if c not in b), None)
        if b is None:
            batches.append(b := {})
        b[c] = r
    for i, b in enumerate(batches):
        by_cluster = {c: r for c, r in b.items()}
        for f in _audit(spark, tmp, [str(r.path) for r in b.values()], f"part{i}"):
            by_cluster[f["cluster_id"]].findings.append(f)
    return whole, runs


def run_copied(spark, tmp: Path, runs: list[Run]) -> list[tuple[Run, Run]]:
    """Each partition directory of ``runs`` copied out of its log dir (no ``meta.properties``
    beside it: no broker id, no cluster id), audited together (each copy is a cluster of its
    own, keyed by its log dir): (the in-place run, the copy's run)."""
    import shutil

    pairs: list[tuple[Run, Run]] = []
    for i, r in enumerate(x for x in runs if x.label == "partition-dir"):
        dest = tmp / "copied" / str(i) / r.path.name
        shutil.copytree(r.path, dest)
        pairs.append((r, Run(r.scenario, "copied", dest, r.topic, r.partition)))
    if pairs:
        by_log_dir = {str(c.path.parent): c for _, c in pairs}
        for f in _audit(spark, tmp, [str(c.path) for _, c in pairs], "copied"):
            by_log_dir[f["log_dir"]].findings.append(f)
    return pairs


def compare(whole: list[dict], run: Run) -> list[str]:
    """The contract of a partial scan against the whole one, as violations (empty: kept).

    * every warning+ finding of the part is one the whole has (same rule, topic,
      partition, producer id) — no alarm the whole capture does not raise;
    * every finding of the whole on the given part (its segment: the finding's first
      offset in it) is in the part with the same kind, or ``undetermined`` /
      ``earlier-segments-not-given`` / ``overdue`` (old, without the coordinator's record) — and never below warning where the whole
      says warning or worse, except ``earlier-segments-not-given`` (info: the
      directory listing shows the part lacks the segments that may hold the
      producer's earlier batches);
    * no part claims retention or loss the whole does not claim."""
    bad = []
    w = {key(f): f for f in whole}
    got = {key(f): f for f in run.findings}
    for k, f in got.items():
        if RANK[f["severity"]] >= 1 and k not in w:
            bad.append(f"{run.label} {run.path.name}: new {f['severity']} {f['rule']}/{f['kind']}: {f['message']}")
        if f["rule"] == "unknown-producer-gap" and f["kind"] in ("retention", "unexplained"):
            if k not in w or w[k]["kind"] != f["kind"]:
                bad.append(f"{run.label} {run.path.name}: claims {f['kind']} the whole does not: {f['message']}")
    for k, f in w.items():
        if (f.get("topic"), f.get("partition")) != (run.topic, run.partition):
            continue
        if f.get("broker_id") is not None and f"broker-{f['broker_id']}" not in str(run.path):
            continue
        if run.label == "segment" and segment_of(run.path.parent, f["first_offset"]) != run.path:
            continue
        p = got.get(k)
        if p is None:
            bad.append(f"{run.label} {run.path.name}: lost {f['severity']} {f['rule']}/{f['kind']}")
        elif p["kind"] != f["kind"]:
            # overdue: a part without the coordinator's record, older than any timeout (the checks first)
            if p["kind"] not in ("undetermined", "earlier-segments-not-given", "overdue"):
                bad.append(f"{run.label} {run.path.name}: {f['rule']} {f['kind']} became {p['kind']}")
            elif p["kind"] == "undetermined" and RANK[p["severity"]] < min(RANK[f["severity"]], 1):
                bad.append(f"{run.label} {run.path.name}: {f['rule']} {f['severity']} became {p['severity']}")
    return bad


def disagreements(findings: list[dict]) -> list[str]:
    """Every stuck-lso finding against the hanging-transaction finding at its offset: same age,
    same transactional id, and in-flight exactly when the LSO finding is ``open``."""
    bad = []
    hanging = {(f["cluster_id"], f.get("broker_id"), f.get("log_dir"), f["topic"], f["partition"], f["first_offset"]): f
               for f in findings if f["rule"] == "hanging-transaction"}
    expect = {"open": {"in-flight"}, "undetermined": {"undetermined"}, "two-phase-commit": {"two-phase-commit"},
              "stuck": {"hanging", "late-write", "unknown-to-coordinator"}, "overdue": {"overdue"},
              "markers-undelivered": {"markers-undelivered"}, "marker-skipped": {"marker-skipped"},
              "closed-after-the-copy": {"closed-after-the-copy"},
              "closed-on-another-replica": {"closed-on-another-replica"}}
    for s in (f for f in findings if f["rule"] == "stuck-lso"):
        h = hanging.get((s["cluster_id"], s.get("broker_id"), s.get("log_dir"), s["topic"], s["partition"],
                         s["first_offset"]))
        if h is None:
            bad.append(f"stuck-lso without its transaction: {s['message']}")
            continue
        if (s["duration_ms"], s.get("transactional_id")) != (h["duration_ms"], h.get("transactional_id")):
            bad.append(f"ages/ids differ: {s['duration_ms']} {h['duration_ms']}: {s['message']}")
        if h["kind"] not in expect[s["kind"]] or s["evidence"]["verdict"] != h["kind"]:
            bad.append(f"stuck-lso {s['kind']} vs hanging-transaction {h['kind']}: {s['message']}")
    return bad


def table(whole: dict[str, list[dict]], runs: list[Run]) -> str:
    lines = ["| input | whole capture | alone |", "|---|---|---|"]
    for r in runs:
        rel = r.path.relative_to(SAMPLE_LOGS)
        here = [f for f in whole.get(r.scenario, []) if (f.get("topic"), f.get("partition")) == (r.topic, r.partition)
                and f"broker-{f.get('broker_id')}" in str(r.path)]
        if r.label == "segment":
            here = [f for f in here if segment_of(r.path.parent, f["first_offset"]) == r.path]

        def fmt(fs):
            return "<br>".join(sorted(f"{f['rule']} {f['kind']} ({f['severity']}) p{f.get('producer_id')}" for f in fs)) or "—"
        lines.append(f"| `{rel}` | {fmt(here)} | {fmt(r.findings)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import tempfile

    # run as a script, this directory comes first on sys.path, where tests/rules (the rule cases)
    # would shadow the rules package: the project first
    here = str(Path(__file__).resolve().parent)
    sys.path[:] = [str(Path(here).parent)] + [p for p in sys.path if p != here] + [here]

    from auditor.spark.session import get_spark

    spark = get_spark("local[2]", {"spark.sql.shuffle.partitions": "2"})
    with tempfile.TemporaryDirectory() as t:
        w, rs = run_all(spark, Path(t))
    print(table(w, rs))
    for r in rs:
        for v in compare(w.get(r.scenario, []), r):
            print("VIOLATION", v)
