"""``txn-audit timeline`` and ``txn-audit coordinator``: forensic views of one partition / one id.

The rules say *that* a partition is stuck; these show *how* it got there: the
partition's batches, markers and LSO in log order next to what the coordinator
recorded for the transactional ids involved, and where an id's coordinator
state lives. Every name that comes from the dump (topics, transactional ids,
log dirs) goes through :func:`safe` before rich renders it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

import click
from rich.table import Table

from auditor.cli.console import err, out, safe, wide


class _BoundParam(click.ParamType):
    """An offset (integer) or an ISO-8601 time, e.g. ``2026-11-20T10:00:00Z``."""

    name = "OFFSET|TIME"

    def convert(self, value, param, ctx):
        from auditor.forensics.timeline import Bound

        if isinstance(value, Bound):
            return value
        try:
            return Bound.parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _spark(master: str | None, confs: tuple[str, ...]):
    from auditor.engine.session import get_spark, parse_conf

    try:
        conf = parse_conf(confs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return get_spark(master, conf, delta=False)  # Parquet tables only


def _fail(message: str) -> None:
    """A request the dump cannot answer: a clear line on stderr, exit status 2."""
    err.print(f"[red]error[/red]: {safe(message)}")
    sys.exit(2)


def _jsonl(events: Iterable[dict[str, Any]]) -> None:
    for ev in events:
        sys.stdout.write(json.dumps(ev, default=str) + "\n")


_STYLE = {"coordinator": "cyan", "lso": "bold yellow", "data-run": "dim", "end": "bold", "control": "magenta"}
_CHUNK = 1000  # rows per rich table: a 100k-line `--batches all` view is printed as it streams


def _row(ev: dict[str, Any]) -> list[str]:
    if ev["event"] == "coordinator":
        where = f"{ev['coordinator_partition']}@{ev['coordinator_offset']}"
        offsets = f"txn-log {where}"
    elif ev["offset"] is None:
        offsets = ""
    elif ev.get("last_offset") is not None and ev["last_offset"] != ev["offset"]:
        offsets = f"{ev['offset']}..{ev['last_offset']}"
    else:
        offsets = str(ev["offset"])
    pid = "" if ev["producer_id"] is None else f"{ev['producer_id']}/{ev['producer_epoch']}"
    style = _STYLE.get(ev["event"])
    if ev["event"] == "marker":
        style = "red" if ev["control_type"] == "ABORT" else "green"
    elif ev["event"] == "coordinator" and ev["names_partition"] is False:
        style = "dim cyan"  # a transaction of this id on other partitions only
    text = safe(ev["detail"])
    if style:
        text = f"[{style}]{text}[/{style}]"
    return [safe(ev["time"] or ""), offsets, pid, safe(ev["transactional_id"] or ""), text,
            "" if ev["lso"] is None else str(ev["lso"])]


def _table(title: str | None) -> Table:
    t = Table(title=title, show_header=title is not None, expand=True, show_edge=False, pad_edge=False)
    t.add_column("time (UTC)", width=24, no_wrap=True)
    t.add_column("offsets", width=16, overflow="fold")
    t.add_column("pid/epoch", width=12, overflow="fold")
    t.add_column("transactional id", width=20, overflow="fold")
    t.add_column("event", overflow="fold", ratio=1)
    t.add_column("LSO", width=10, justify="right")
    return t


def _render(events: Iterable[dict[str, Any]], title: str) -> int:
    """Print events as rich tables of up to ``_CHUNK`` rows (header on the first)."""
    console = wide()
    t = _table(title)
    rows = shown = 0
    for ev in events:
        t.add_row(*_row(ev))
        rows += 1
        shown += 1
        if rows >= _CHUNK:
            console.print(t)
            t, rows = _table(None), 0
    if rows:
        console.print(t)
    return shown


@click.command("timeline")
@click.argument("tables", type=click.Path(exists=True, file_okay=False))
@click.option("--topic", required=True, help="Topic of the partition.")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="Partition number.")
@click.option("--producer-id", type=int, default=None, help="Only this producer's batches (the LSO still counts every producer).")
@click.option("--from", "start", type=_BoundParam(), default=None, help="First offset, or an ISO-8601 time (first batch stamped at or after it).")
@click.option("--to", "stop", type=_BoundParam(), default=None, help="Last offset, or an ISO-8601 time (last batch before the first one stamped after it).")
@click.option("--broker", type=int, default=None, help="Replica to replay when several brokers/log dirs hold the partition (default: the longest log).")
@click.option("--batches", "batches", type=click.Choice(["summary", "all"]), default="summary", show_default=True,
              help="summary: runs of ordinary data batches of one producer session on one line.")
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
@click.option("--master", default=None, help="Spark master URL (default: embedded local[*]).")
@click.option("--conf", "confs", multiple=True, help="Spark setting key=value (repeatable).")
def timeline_cmd(tables, topic, partition, producer_id, start, stop, broker, batches, fmt, master, confs) -> None:
    """The forensic view of one partition: batches, markers, the LSO, coordinator state changes.

    Replays the partition in offset order (sessions, transaction starts, markers,
    where the last stable offset is held and moves), interleaved by time with the
    __transaction_state records of the transactional ids involved. Exit status 2
    when the topic, partition or broker is not in TABLES.
    """
    from auditor.engine.views import AuditContext
    from auditor.forensics.timeline import Timeline, TimelineError, TimelineRequest

    if not (Path(tables) / "batches").is_dir():
        _fail(f"{tables} has no batches table: is it a directory written by `txn-audit ingest`?")
    spark = _spark(master, confs)
    tl = Timeline(AuditContext(spark, tables),
                  TimelineRequest(topic, partition, producer_id, start, stop, broker, summary=batches == "summary"))
    try:
        rep = tl.choose()
    except TimelineError as exc:
        _fail(str(exc))
        return
    others = [r for r in tl.replicas if r != rep]
    err.print(f"[dim]replaying {safe(topic)}-{partition}: {safe(rep.describe())}[/dim]")
    if others:
        err.print(f"[dim]{len(others)} other replica(s), pick one with --broker: "
                  + "; ".join(safe(r.describe()) for r in others) + "[/dim]")
    counts = {"log": 0}

    def counted(evs: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for ev in evs:
            if ev["source"] == "log":
                counts["log"] += 1
            elif ev["event"] == "end" and not counts["log"]:
                err.print("[yellow]no batches of this partition in the requested range[/yellow]")
            yield ev

    events = counted(tl.events())
    if fmt == "jsonl":
        _jsonl(events)
        return
    title = f"{safe(topic)}-{partition} on broker {rep.broker_id}" + (
        f", producer {producer_id}" if producer_id is not None else "")
    _render(events, title)


@click.command("coordinator")
@click.argument("tables", type=click.Path(exists=True, file_okay=False))
@click.argument("transactional_id")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="Partitions of __transaction_state (default: from the dump's metadata log, else its log dirs, else 50).")
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
def coordinator_cmd(tables, transactional_id, partitions, fmt) -> None:
    """Which __transaction_state partition owns TRANSACTIONAL_ID, and its state history.

    The partition is abs(javaHashCode(id)) % N exactly as the broker computes it
    (Kafka's Utils.abs maps Integer.MIN_VALUE to 0); the history is every
    transaction_log record of the id in offset order, tombstones included.
    """
    from auditor.forensics.coordinator import TXN_TOPIC, lookup, lookup_json, record_json
    from auditor.formats.txnlog import kafka_abs

    lookups = lookup(tables, transactional_id, partitions)
    for lk in lookups:
        if lk.stored_in and lk.stored_in != [lk.partition]:
            err.print(f"[yellow]warning[/yellow]: records of {safe(transactional_id)} are in {TXN_TOPIC}-"
                      + ",".join(map(str, lk.stored_in)) + f", not {lk.partition}: the partition count was probably "
                      f"not {lk.partitions.count} when they were written (try --partitions)")
        if len(lk.brokers) > 1:
            err.print(f"[dim]{len(lk.brokers)} brokers hold these records; showing broker "
                      f"{lk.brokers[0]}'s copy of each[/dim]")
    if fmt == "jsonl":
        for lk in lookups:
            sys.stdout.write(json.dumps(lookup_json(lk), default=str) + "\n")
            for r in lk.records:
                sys.stdout.write(json.dumps(record_json(r), default=str) + "\n")
        return
    for lk in lookups:
        cluster = f" (cluster {safe(lk.cluster_id)})" if lk.cluster_id and len(lookups) > 1 else ""
        out.print(f"transactional id [bold]{safe(transactional_id)}[/bold]{cluster} -> "
                  f"[bold]{TXN_TOPIC}-{lk.partition}[/bold]")
        out.print(f"  String.hashCode {lk.java_hash}, Utils.abs {kafka_abs(lk.java_hash)}, "
                  f"% {lk.partitions.count} partitions ({safe(lk.partitions.source)}: {safe(lk.partitions.detail)})")
        if not lk.records:
            out.print("  no records in this dump")
            continue
        t = Table(title=f"{len(lk.records)} {TXN_TOPIC} records", expand=False)
        for c in ("offset", "time (UTC)", "state", "pid/epoch", "prev/next pid", "timeout ms", "partitions"):
            t.add_column(c, overflow="fold")
        for r in lk.records:
            j = record_json(r)
            if j["is_tombstone"]:
                t.add_row(f"{r['partition']}@{r['offset']}", safe(j["time"] or ""), "[yellow]tombstone[/yellow]",
                          "", "", "", "(id expired or removed)")
                continue
            prev_next = "" if j["previous_producer_id"] is None and j["next_producer_id"] is None else (
                f"{j['previous_producer_id']}/{j['next_producer_id']}")
            parts = "" if j["topic_partitions"] is None else ", ".join(j["topic_partitions"])
            t.add_row(f"{r['partition']}@{r['offset']}", safe(j["time"] or ""), safe(j["state"]),
                      f"{j['producer_id']}/{j['producer_epoch']}", prev_next, safe(j["transaction_timeout_ms"]),
                      safe(parts))
        wide().print(t)
