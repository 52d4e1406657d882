"""The capture driver: run a scenario on fresh brokers and copy what they left (:func:`capture`), derive
a mutation (:func:`run_mutation`), and the command line (:func:`main`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import time
from pathlib import Path

from scripts.capture import __doc__ as package_doc
from scripts.capture.bookkeeping import tp
from scripts.capture.clients import ck_version, kp_version
from scripts.capture.context import Ctx
from scripts.capture.mutations import MUTATIONS
from scripts.capture.paths import GENERATED_BY, SAMPLE_LOGS
from scripts.capture.registry import Scenario, all_scenarios
from scripts.kafka.harness import KafkaCluster, cluster_id_for, libs_dir

log = logging.getLogger("capture")


def _dir_size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def capture(sc: Scenario, out: Path = SAMPLE_LOGS) -> dict:
    """Run ``sc`` on fresh brokers and write ``out/<name>/``: the log dirs copied unmodified (broker-<id>/)
    and expected.json; returns a summary line's figures."""
    t0 = time.monotonic()
    if sc.prepare is not None:
        sc.prepare()
    ctx = Ctx(sc.name, sc.version, sc.overrides, sc.features, sc.brokers, sc.node_overrides, sc.zookeeper)
    try:
        ctx.start()
        start_s = ctx.broker.timings.get("start_s")
        result = sc.run(ctx)
        if ctx.ending == "kill":
            ctx.broker.kill()
            ctx.close_clients()
        else:
            ctx.close_clients()
            ctx.broker.stop()
        for check in ctx.after_stop:  # verifications of the log dirs as they will be copied
            result.setdefault("capture_checks", {}).update(check())
    except BaseException:
        ctx.broker.kill()
        log.error("broker output tail:\n%s", ctx.broker.log_tail(40))
        raise
    dest = out / sc.name
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    excluded: list[dict] = []
    cluster = isinstance(ctx.broker, KafkaCluster)
    log_dirs = ctx.broker.log_dirs() if cluster else {1: ctx.broker.log_dir}
    current = {"root": ctx.broker.log_dir if not cluster else None, "prefix": ""}

    def ignore(dirpath: str, names: list[str]) -> list[str]:
        """Leave out preallocated (>= 1 MiB) index files of a killed broker, recording them."""
        out = []
        for n in names:
            f = Path(dirpath) / n
            if (not sc.keep_preallocated_indexes and n.endswith((".index", ".timeindex")) and f.is_file()
                    and f.stat().st_size >= 1 << 20):
                data = f.read_bytes()
                used = len(data.rstrip(b"\0"))
                excluded.append({
                    "path": current["prefix"] + str(f.relative_to(current["root"])), "size": len(data),
                    "non_zero_prefix_bytes": used,
                    "why": "preallocated index of the active segment, left at its full preallocated size by "
                           + ("the SIGKILL (a clean shutdown trims it)" if ctx.ending == "kill" else
                              "the clean stop (Kafka 4.4.0 trims only partition logs' indexes at shutdown, "
                              "through UnifiedLog.prepareActiveSegmentForClose; not the metadata log's)")
                           + "; the metadata log ignores "
                           "log.index.size.max.bytes, so it is 10 MiB, all zeros after the prefix. Not copied "
                           "to keep sample_logs small; Kafka's files are otherwise copied unmodified."})
                out.append(n)
        return out

    for node_id, log_dir in log_dirs.items():
        current["root"], current["prefix"] = log_dir, (f"broker-{node_id}/" if cluster else "")
        shutil.copytree(log_dir, dest / f"broker-{node_id}", symlinks=True, ignore=ignore)
    for name, src in ctx.extra_dirs.items():  # e.g. a tiered-storage scenario's remote store
        shutil.copytree(src, dest / name, symlinks=True)
    rec = ctx.rec
    props = ctx.broker.server_properties()
    props.update({k: str(v) for k, v in (ctx.broker.common_overrides if cluster else sc.overrides).items()})
    for k in ("listeners", "advertised.listeners", "controller.quorum.voters", "log.dirs", "zookeeper.connect"):
        props.pop(k, None)
    if cluster:
        broker_info = {"ending": ctx.ending_text or ("SIGKILL" if ctx.ending == "kill" else "clean shutdown (SIGTERM)"),
                       "nodes": sorted(log_dirs), "topology": f"{ctx.brokers} KRaft nodes, each "
                       "process.roles=broker,controller, static quorum of all of them (controller.quorum.voters)",
                       "cluster_id": ctx.broker.cluster_id, "features": sc.features or "format defaults",
                       "server_properties": props,
                       "node_overrides": {str(k): {kk: str(vv) for kk, vv in v.items()}
                                          for k, v in sorted(ctx.broker.node_overrides.items())},
                       "small_segments_via": "topic config " + next(iter(ctx.segment_config(0)))}
    else:
        broker_info = {"ending": "SIGKILL" if ctx.ending == "kill" else "clean shutdown (SIGTERM)",
                       "node_id": 1, "cluster_id": ctx.broker.cluster_id, "features": sc.features or "format defaults",
                       "server_properties": props,
                       "small_segments_via": "topic config " + next(iter(ctx.segment_config(0)))}
        if sc.zookeeper:
            zk = sorted(p.name for p in libs_dir(sc.version).glob("zookeeper-[0-9]*.jar"))
            broker_info.update(node_id=None, broker_id=1, features=None,
                               mode=f"ZooKeeper mode: one standalone ZooKeeper ({', '.join(zk)}, from the broker's "
                                    "jars); cluster id put into /cluster/id before the broker's first start")
    expected = {
        "scenario": sc.name,
        "kafka_version": sc.version,
        "description": " ".join(result.pop("description").split()),
        "generated_by": f"{GENERATED_BY} --only {sc.name}",
        "broker": broker_info,
        "clients": {"confluent-kafka": ck_version(), "kafka-python (protocol layer)": kp_version(),
                    "java": f"kafka-clients {sc.version}" if ctx.used_java else None},
        "mutation": None,
        "excluded_files": excluded,
        "expect": result.pop("expect"),
    }
    counts = rec.counts()
    for a in expected["expect"]["anomalies"]:
        if a["type"] in ("hanging-transaction", "hanging-transactional-offset-commit"):  # opened by a raw request
            counts.setdefault(tp(a["topic"], a["partition"]), {"committed": 0, "aborted": 0, "open": 0})["open"] += 1
    expected["expect"]["counts"] = dict(sorted(counts.items()))
    expected["expect"]["end_offsets_before_shutdown"] = dict(sorted(rec.end_offsets.items()))
    expected.update(result)
    if rec.keyed:
        expected["keyed_records"] = {
            "format": "[offset, key, tombstone (null value), writer] per record written with a key, from the "
                      "delivery reports / produce responses (before compaction)",
            **{k: v for k, v in sorted(rec.keyed.items())}}
    expected["producers"] = list(rec.producers.values())
    expected["transactions"] = [t.as_json() for t in rec.txns]
    expected["writes"] = rec.writes
    expected["raw_requests"] = rec.raw
    expected["size_bytes"] = sum(_dir_size(dest / f"broker-{i}") for i in log_dirs)
    (dest / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    took = time.monotonic() - t0
    log.info("%s (Kafka %s): start %.1fs, total %.1fs, %d KB", sc.name, sc.version, start_s or -1, took,
             expected["size_bytes"] // 1024)
    return {"name": sc.name, "seconds": took, "start_s": start_s, "size": expected["size_bytes"]}


def run_mutation(name: str, out: Path = SAMPLE_LOGS) -> dict:
    """Derive ``out/<name>/`` from the capture ``out/<base>/`` (see :mod:`scripts.capture.mutations`)."""
    base, fn = MUTATIONS[name]
    if not (out / base / "broker-1").is_dir() or not (out / base / "expected.json").is_file():
        raise RuntimeError(f"mutation {name} needs the capture {base}: run --only {base} first")
    t0 = time.monotonic()
    result = fn(name, out)
    # a mutated copy must not pass for the cluster it was copied from (the auditor compares
    # everything within a cluster id): it gets the cluster id derived from its own name
    meta = out / name / "broker-1" / "meta.properties"
    cid = cluster_id_for(name)
    meta.write_text("".join(f"cluster.id={cid}\n" if line.startswith("cluster.id=") else line
                            for line in meta.read_text().splitlines(keepends=True)))
    result["mutation"]["meta_properties"] = (f"cluster.id set to {cid} (derived from the scenario name) so the copy "
                                             "is a cluster of its own, not a second dump of its source")
    bexp = json.loads((out / base / "expected.json").read_text())
    expected = {
        "scenario": name,
        "kafka_version": bexp["kafka_version"],
        "description": " ".join(result.pop("description").split()),
        "generated_by": f"{GENERATED_BY} --only {name} (after --only {base})",
        "mutation": result.pop("mutation"),
        "expect": result.pop("expect"),
    }
    expected.update(result)
    expected["size_bytes"] = _dir_size(out / name / "broker-1")
    (out / name / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    log.info("%s (mutation of %s): %d KB", name, base, expected["size_bytes"] // 1024)
    return {"name": name, "seconds": time.monotonic() - t0, "size": expected["size_bytes"]}


def main(argv: list[str] | None = None) -> int:
    """``scripts/capture_scenarios.py`` / ``python -m scripts.capture``: capture, list."""
    ap = argparse.ArgumentParser(description=package_doc.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="scenario name (repeatable)")
    ap.add_argument("--version", help="run the chosen scenarios against this Kafka version instead of their pinned one")
    ap.add_argument("--out", type=Path, default=SAMPLE_LOGS,
                    help="where <scenario>/ dirs go (default sample_logs/; use another dir with --version)")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    out = args.out.absolute()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    scenarios = all_scenarios()
    names = list(scenarios) + list(MUTATIONS)
    if args.list:
        for n in names:
            sc = scenarios.get(n)
            print(f"{n:34s} {sc.version if sc else 'mutation of ' + MUTATIONS[n][0]}")
        return 0
    chosen = args.only or names
    unknown = [n for n in chosen if n not in names]
    if unknown:
        ap.error(f"unknown scenario(s): {unknown}; see --list")
    t0 = time.monotonic()
    summary = []
    for n in chosen:
        if n in scenarios:
            sc = scenarios[n]
            if args.version:
                sc = dataclasses.replace(sc, version=args.version)
            summary.append(capture(sc, out))
        else:
            summary.append(run_mutation(n, out))
    for s in summary:
        print(f"{s['name']:34s} {s['size'] / 1024:8.1f} KB  {s['seconds']:6.1f} s")
    print(f"total {time.monotonic() - t0:.1f} s, {sum(s['size'] for s in summary) / 1024:.1f} KB")
    return 0

