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
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import click
from rich.console import Console
from rich.text import Text

from auditor.report.console import err, safe, wide

if TYPE_CHECKING:
    from auditor.forensics.coordinator_lookup import Lookup


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
    from auditor.spark.session import get_spark, parse_conf

    try:
        conf = parse_conf(confs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    return get_spark(master, conf, delta=False)  # Parquet tables only


def _fail(message: str) -> None:
    """A request the dump cannot answer: a clear line on stderr, exit status 2."""
    err.print(f"[red]Error:[/red] {safe(message)}")
    sys.exit(2)


def tables_of(path: str) -> str:
    """TABLES as given, or -- given what a scan read (a log dir, a partition directory) -- the
    tables that scan kept (``scan`` keeps them under a digest of its inputs: the same inputs,
    unchanged, find them). Fails (status 2) saying how to get tables when there are none."""
    if (Path(path) / "batches").is_dir() or (Path(path) / "_ingest.json").is_file():
        return path
    from auditor.ingest.cache import default_tables, inputs_digest, kept
    from auditor.ingest.plan import make_plan

    digest = inputs_digest([path], make_plan([path]))
    tables = default_tables(digest)
    if kept(tables, digest) is None:
        _fail(f"{path} is not a tables directory, and no scan of it kept tables: run `txn-audit scan {path}` "
              "(it keeps them; the files must be unchanged since) or `txn-audit ingest` it")
    err.print(f"[dim]reading the tables `txn-audit scan {safe(path)}` kept: {safe(str(tables))}[/dim]")
    return str(tables)


def _jsonl(events: Iterable[dict[str, Any]]) -> None:
    for ev in events:
        sys.stdout.write(json.dumps(ev, default=str) + "\n")


# -- one line per event ------------------------------------------------------------------------

DETAIL_MIN = 20  # the detail column never gets fewer columns than this, even on a narrower terminal
_STYLE = {"coordinator": "cyan", "lso": "yellow", "gap": "yellow", "data-run": "dim", "end": "bold", "control": "magenta"}
_WIDE_HELP = ("Print every detail whole, one line per event however wide (the terminal wraps it); by default a "
              "detail longer than the terminal's width is cut, with an ellipsis.")


def fit(text: str, room: int) -> str:
    """``text`` on at most ``room`` columns: cut at a word boundary, with an ellipsis."""
    if len(text) <= room:
        return text
    if room <= 1:
        return "…"[:room]
    cut = text[: room - 1]
    space = cut.rfind(" ")
    if space >= room // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def prose(console: Console, text: str | Text, *, uncut: bool, indent: int = 0) -> None:
    """A line of prose (a title, a note): wrapped at spaces to the terminal with ``indent`` columns
    before every line, so it is read whole at any width; with ``uncut`` (``--wide``) on one line,
    like every event line then."""
    t = Text(text) if isinstance(text, str) else text
    pieces = [t] if uncut else t.wrap(console, max(DETAIL_MIN, console.width - indent))
    for piece in pieces:
        piece.rstrip()
        console.print(Text(" " * indent) + piece, soft_wrap=True)


def _clock(ms: int | None) -> tuple[str, str]:
    """(date, HH:MM:SS.mmm) of an instant, UTC; ("", "") when unknown."""
    from auditor.forensics.replay import iso_ms

    iso = iso_ms(ms)
    return ("", "") if iso is None else (iso[:10], iso[11:23])


class _Lines:
    """Fixed columns, a detail column filling the line, a date line when the day changes.

    The detail column takes what the terminal's width leaves (200 columns when piped), so a wide
    terminal shows long details whole; ``uncut`` (``--wide``) never cuts one, for a reader who
    needs every word (a transactional id, a coordinator record) whatever the terminal."""

    def __init__(self, console: Console, columns: list[tuple[str, int, str]], *, uncut: bool = False) -> None:
        self.console = console
        self.width = console.width
        self.uncut = uncut
        self.columns = columns  # (header, width, "<" or ">")
        self.day = ""

    def header(self, title: str) -> None:
        prose(self.console, Text(safe(title, markup=False), style="bold"), uncut=self.uncut)
        head = "  " + f"{'time (UTC)':<12} " + " ".join(f"{h:{a}{w}}" for h, w, a in self.columns) + " detail"
        self.console.print(Text(head, style="dim"), soft_wrap=True)

    def line(self, time_ms: int | None, cells: list[str], detail: str, *, style: str | None = None,
             anomaly: bool = False) -> None:
        day, clock = _clock(time_ms)
        if day and day != self.day:
            self.day = day
            self.console.print(Text(f"  -- {day} --", style="dim"), soft_wrap=True)
        t = Text()
        t.append("!" if anomaly else " ", style="bold red" if anomaly else None)
        t.append(" " + f"{clock:<12} ")
        t.append(" ".join(f"{safe(c, markup=False):{a}{w}}" for c, (_, w, a) in zip(cells, self.columns)) + " ",
                 style=style)
        detail = safe(detail, markup=False)
        if not self.uncut:
            detail = fit(detail, max(DETAIL_MIN, self.width - len(t.plain)))
        t.append(detail, style="bold red" if anomaly else style)
        self.console.print(t, soft_wrap=True)


_TIMELINE_COLUMNS = [("event", 8, "<"), ("offsets", 11, ">"), ("pid/epoch", 9, ">"), ("LSO", 6, ">")]


def _event_cells(ev: dict[str, Any]) -> tuple[list[str], str, str | None]:
    """(cells, detail, style) of a timeline event."""
    kind = ev["event"]
    label = kind
    if kind == "coordinator":
        offsets = f"{ev['coordinator_partition']}@{ev['coordinator_offset']}"
        label = "coord"
    elif ev["offset"] is None:
        offsets = ""
    elif ev.get("last_offset") is not None and ev["last_offset"] != ev["offset"]:
        offsets = f"{ev['offset']}..{ev['last_offset']}"
    else:
        offsets = str(ev["offset"])
    pid = "" if ev["producer_id"] is None else f"{ev['producer_id']}/{ev['producer_epoch']}"
    style = _STYLE.get(kind)
    detail = ev["detail"] or ""
    if kind == "marker":
        style = "red" if ev["control_type"] == "ABORT" else "green"
        label = str(ev["control_type"] or "marker")
    elif kind == "coordinator":
        if ev["names_partition"] is False:
            style = "dim cyan"  # a transaction of this id on other partitions only
        detail = f"{ev['transactional_id']}: {detail}"
    elif kind in ("data", "data-run") and ev.get("transactional_id") and (ev.get("opens_transaction") or ev.get("session_start")):
        detail = f"{detail} ({ev['transactional_id']})"
    untold = [a for a in ev.get("anomalies") or () if a.lower() not in detail.lower()]
    if untold:
        detail = "[" + ", ".join(untold) + "] " + detail
    lso = "" if ev["lso"] is None else str(ev["lso"])
    return [label, offsets, pid, lso], detail, style


def _render(events: Iterable[dict[str, Any]], title: str, uncut: bool = False) -> int:
    """Print events one line each, to the terminal's width (all of each detail with ``uncut``;
    anomalies marked ``!``, in red)."""
    lines = _Lines(wide(), _TIMELINE_COLUMNS, uncut=uncut)
    lines.header(title)
    shown = 0
    for ev in events:
        cells, detail, style = _event_cells(ev)
        lines.line(ev["time_ms"], cells, detail, style=style, anomaly=bool(ev.get("anomalies")))
        shown += 1
    return shown


@click.command("timeline")
@click.argument("tables", type=click.Path(exists=True, file_okay=False))
@click.option("--topic", required=True, help="Topic of the partition.")
@click.option("--partition", type=click.IntRange(min=0), required=True, help="Partition number.")
@click.option("--producer-id", type=int, default=None, help="Only this producer's batches (the LSO still counts every producer).")
@click.option("--from", "start", type=_BoundParam(), default=None, help="First offset, or an ISO-8601 time (first batch stamped at or after it).")
@click.option("--to", "stop", type=_BoundParam(), default=None, help="Last offset, or an ISO-8601 time (last batch before the first one stamped after it).")
@click.option("--cluster", default=None, metavar="CLUSTER_ID",
              help="Cluster of the partition (required when several clusters of TABLES hold it).")
@click.option("--broker", type=int, default=None, help="Replica to replay when several brokers/log dirs hold the partition (default: the longest log).")
@click.option("--batches", "batches", type=click.Choice(["summary", "all"]), default="summary", show_default=True,
              help="summary: runs of ordinary data batches of one producer session on one line.")
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
@click.option("--wide", "uncut", is_flag=True, help=_WIDE_HELP)
@click.option("--engine", type=click.Choice(["auto", "arrow", "spark"]), default="auto", show_default=True,
              help="arrow: read the tables with pyarrow and replay in-process (no Spark); spark: Spark jobs (big "
                   "tables); auto: arrow unless the partition has 2M batches or more.")
@click.option("--master", default=None, help="Spark master URL (default: embedded local[*]; Spark engine only).")
@click.option("--conf", "confs", multiple=True, help="Spark setting key=value (repeatable; Spark engine only).")
def timeline_cmd(tables, topic, partition, producer_id, start, stop, cluster, broker, batches, fmt, uncut, engine,
                 master, confs) -> None:
    """The forensic view of one partition: batches, markers, the LSO, coordinator state changes.

    Replays the partition in offset order (sessions, transaction starts, markers,
    where the last stable offset is held and moves), interleaved by time with the
    __transaction_state records of the transactional ids involved. Data written by
    a producer session after its own marker on the partition, that no coordinator
    record adds again, is marked a late write (!). Local tables are read with
    pyarrow (no Spark) unless the partition is big (--engine).

    \b
    Examples:
      txn-audit timeline tables/ --topic transfers --partition 0
      txn-audit timeline tables/ --topic orders --partition 0 --cluster CLUSTER_ID
      txn-audit timeline tables/ --topic orders --partition 0 --from 2026-11-20T10:00:00Z --format jsonl
      txn-audit timeline tables/ --topic orders --partition 0 --wide | less -S

    \b
    TABLES is what `ingest` wrote or `scan` kept, or what a scan read (a log
    dir): its kept tables are read then.

    \b
    Exit status: 0 shown, 2 the topic, partition, cluster or broker is not in
    TABLES, or several clusters hold the partition and --cluster does not say which.
    """
    from auditor.forensics.timeline import TimelineError, TimelineRequest, open_timeline

    tables = tables_of(tables)
    if not (Path(tables) / "batches").is_dir():
        _fail(f"{tables} has no batches table: is it a directory written by `txn-audit ingest`?")
    req = TimelineRequest(topic, partition, producer_id, start, stop, broker, summary=batches == "summary",
                          cluster=cluster)
    try:
        tl = open_timeline(tables, req, engine, lambda: _spark(master, confs))
        rep = tl.choose()
    except TimelineError as exc:
        _fail(str(exc))
        return
    others = tl.others()
    err.print(f"[dim]replaying {safe(topic)}-{partition} ({tl.engine}): {safe(rep.describe())}[/dim]")
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
    title = f"{topic}-{partition}, cluster {rep.cluster_id}, broker {rep.broker_id}" + (
        f", producer {producer_id}" if producer_id is not None else "")
    _render(events, title, uncut)


_COORDINATOR_COLUMNS = [("record", 9, ">"), ("state", 14, "<"), ("pid/epoch", 9, ">")]


def _record_cells(r: dict[str, Any], owner: int) -> tuple[list[str], str, str | None, list[str]]:
    """(cells, detail, style, anomalies) of a ``transaction_log`` record."""
    from auditor.forensics.coordinator_lookup import record_json

    j = record_json(r)
    where = f"{r['partition']}@{r['offset']}"
    anomalies = []
    if r["partition"] != owner:
        anomalies.append(f"stored in partition {r['partition']}, not {owner}")
    if j["is_tombstone"]:
        return [where, "tombstone", ""], "the id expired or was removed", "yellow", anomalies
    bits = []
    if j["topic_partitions"]:
        bits.append("[" + ", ".join(j["topic_partitions"]) + "]")
    if j["previous_producer_id"] is not None or j["next_producer_id"] is not None:
        bits.append(f"prev/next pid {j['previous_producer_id']}/{j['next_producer_id']}")
    if j["transaction_timeout_ms"] is not None:
        bits.append(f"timeout {j['transaction_timeout_ms']} ms")
    state = str(j["state"])
    style = "red" if "Abort" in state else ("green" if "Commit" in state else ("cyan" if state == "Ongoing" else None))
    pid = "" if j["producer_id"] is None else f"{j['producer_id']}/{j['producer_epoch']}"
    return [where, state, pid], ", ".join(bits), style, anomalies


@click.command("coordinator")
@click.argument("tables", type=click.Path(exists=True, file_okay=False))
@click.argument("transactional_id")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="Partitions of __transaction_state (default: from the dump's metadata log, else its log dirs, else 50).")
@click.option("--cluster", default=None, metavar="CLUSTER_ID",
              help="Cluster to answer for (required when records of the id are in several clusters of TABLES).")
@click.option("--format", "fmt", type=click.Choice(["table", "jsonl"]), default="table", show_default=True)
@click.option("--wide", "uncut", is_flag=True, help=_WIDE_HELP)
def coordinator_cmd(tables, transactional_id, partitions, cluster, fmt, uncut) -> None:
    """Which __transaction_state partition owns TRANSACTIONAL_ID, and its state history.

    The partition is abs(javaHashCode(id)) % N exactly as the broker computes it
    (Kafka's Utils.abs maps Integer.MIN_VALUE to 0); the history is every
    transaction_log record of the id in offset order, tombstones included, one line
    each (a record outside the id's partition is marked !).

    \b
    Examples:
      txn-audit coordinator tables/ transfers-txn
      txn-audit coordinator tables/ orders-txn-a --cluster CLUSTER_ID --format jsonl

    \b
    Exit status: 0 shown, 2 records of the id are in several clusters and
    --cluster does not say which, or --cluster names a cluster without records of it.
    """
    from auditor.forensics.coordinator_lookup import TXN_TOPIC, lookup, lookup_json, record_json
    from auditor.forensics.timeline import describe_clusters

    tables = tables_of(tables)
    lookups = lookup(tables, transactional_id, partitions)
    with_records = {lk.cluster_id: lk.brokers for lk in lookups if lk.records}
    if not with_records:
        from auditor.forensics.coordinator_lookup import known_transactional_ids
        from auditor.forensics.timeline import did_you_mean

        hint = did_you_mean(transactional_id, known_transactional_ids(tables))
        if hint:
            err.print(f"[yellow]note[/yellow]: no records of {safe(transactional_id)!r} in this dump{safe(hint)}")
    if cluster is not None:
        mine = [lk for lk in lookups if lk.cluster_id == cluster]
        if not mine:
            known = with_records or {lk.cluster_id: lk.brokers for lk in lookups}
            _fail(f"cluster {cluster!r} has no records of {transactional_id!r} "
                  f"(clusters{' with records' if with_records else ''}: {describe_clusters(known)})")
        lookups = mine
    elif len(with_records) > 1:
        _fail(f"records of {transactional_id!r} are in {len(with_records)} clusters; pick one with --cluster: "
              f"{describe_clusters(with_records)}")
    elif with_records:
        lookups = [lk for lk in lookups if lk.records]
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
        _print_lookup(lk, transactional_id, uncut)


def _print_lookup(lk: Lookup, transactional_id: str, uncut: bool) -> None:
    """One cluster's answer: the owning partition, how it was computed, then the id's records one
    line each. The two lines of prose wrap at spaces (a topic or a source's detail can be long);
    the records' details get what the terminal's width leaves, or all of it with ``uncut``."""
    from auditor.forensics.coordinator_lookup import TXN_TOPIC
    from auditor.formats.txnlog import kafka_abs

    console = wide()
    cluster_note = f" (cluster {safe(lk.cluster_id)})" if lk.cluster_id else ""
    prose(console, Text.from_markup(f"transactional id [bold]{safe(transactional_id)}[/bold]{cluster_note} -> "
                                    f"[bold]{TXN_TOPIC}-{lk.partition}[/bold]"), uncut=uncut)
    prose(console, f"String.hashCode {lk.java_hash}, Utils.abs {kafka_abs(lk.java_hash)}, % {lk.partitions.count} "
                   f"partitions ({safe(lk.partitions.source, markup=False)}: "
                   f"{safe(lk.partitions.detail, markup=False)})", uncut=uncut, indent=2)
    if not lk.records:
        prose(console, "no records in this dump", uncut=uncut, indent=2)
        return
    lines = _Lines(console, _COORDINATOR_COLUMNS, uncut=uncut)
    lines.header(f"{len(lk.records)} {TXN_TOPIC} records")
    for r in lk.records:
        cells, detail, style, anomalies = _record_cells(r, lk.partition)
        if anomalies:
            detail = "[" + "; ".join(anomalies) + "] " + detail
        lines.line(r.get("timestamp"), cells, detail, style=style, anomaly=bool(anomalies))
