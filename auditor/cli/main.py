"""``txn-audit``: the command line (click + rich).

Results go to stdout, diagnostics to stderr: the tool's own lines only. The
driver JVM's output (launcher, log4j, Hadoop) goes to a log file of the run,
named on stderr when a command fails; ``-v`` (``txn-audit -v CMD`` or ``CMD
-v``) sends it to stderr instead (auditor/spark/session.py).

Exit status, the same for every command (docs/operations.md, "Exit status"):

  0  done; no finding at or above ``--fail-on`` (scan, audit, report, batch),
     every input clean (ingest, dump)
  1  findings at or above ``--fail-on``; for ingest and dump, whose findings
     are damaged input files: some file could only be decoded in part
  2  usage error, or input that cannot be used (missing path, nothing
     readable, not a tables/findings directory), or an output directory that
     cannot be written (one line naming it, and nothing in it replaced)
  3  ``batch``: another run holds the warehouse's lock
  1  with a traceback: an internal error (a bug: please report it)

``--exit-zero`` (scan, audit, report) turns status 1 into 0, as ruff's does.

Start-up matters for ``dump`` (a whole process per file is how it is used and
compared with Kafka's ``DumpLogSegments``), so nothing is imported that a
command does not need: each command's module is loaded when that command runs,
and the click group itself (:data:`cli`, click's import costs ~30 ms) is built
on first use. The plainest ``dump`` -- ``txn-audit dump [--records] FILE...``,
no other option -- runs without click at all (:func:`_plain_dump`), with
click's standalone behaviour where it shows: ``Aborted!`` and status 1 on
Ctrl-C, status 1 and no traceback on a closed pipe, click's own usage error for
a path it would refuse (it is then handed to click).
"""

from __future__ import annotations

import importlib
import os
import sys

from auditor import __version__

# command name -> (module, attribute): a command's module (and what it imports:
# pyspark, pyarrow, rich) is loaded only when that command runs, so e.g.
# ``txn-audit dump`` starts without Spark's Python side.
_COMMANDS = {
    "ingest": ("auditor.cli.ingest_cmd", "ingest_cmd"),
    "tables": ("auditor.cli.ingest_cmd", "tables_cmd"),
    "dump": ("auditor.cli.dump_cmd", "dump_cmd"),
    "batch": ("auditor.cli.batch_cmd", "batch_cmd"),
    "timeline": ("auditor.cli.forensics_cmd", "timeline_cmd"),
    "coordinator": ("auditor.cli.forensics_cmd", "coordinator_cmd"),
    "report": ("auditor.cli.report_cmd", "report_cmd"),
    "scan": ("auditor.cli.audit_cmd", "scan_cmd"),
    "audit": ("auditor.cli.audit_cmd", "audit_cmd"),
    "rules": ("auditor.cli.rules_cmd", "rules_cmd"),
    "explain": ("auditor.cli.rules_cmd", "explain_cmd"),
}
_PROG = "txn-audit"
_VERBOSE_ENV = "TXN_AUDIT_VERBOSE"  # auditor.spark.session.VERBOSE_ENV (not imported: dump starts without it)
_DUMP_EXPECTS = ("expected a Kafka log file: a segment (.log), an index (.index, .timeindex, .txnindex), "
                 "a snapshot (.snapshot, .checkpoint) or a checkpoint file")


def _missing(files) -> list[str]:
    """The local paths among ``files`` that do not exist (URIs of remote stores are not looked at).
    ``dump`` refuses to start (status 2) only when none of its files exists: in a running broker's
    log dir, a segment listed by the shell can be deleted (retention, the cleaner) before it is
    read; it is then named on stderr like any unreadable file, the rest is dumped, and the status
    is 1."""
    gone = []
    for f in files:
        if "://" in f and not f.startswith("file:"):
            continue
        p = f[len("file:"):] if f.startswith("file:") else f
        if p.startswith("//"):
            p = "/" + p.lstrip("/")
        if not os.path.lexists(p):
            gone.append(f)
    return gone


def _dump_missing_message(gone: list[str]) -> str:
    return "; ".join(f"{g}: no such file" for g in gone) + f" ({_DUMP_EXPECTS})"


_AT_EXIT = {"process": False, "registered": False}


def _log_hint() -> None:
    """On a failure: name the driver JVM's log of this run, if a JVM was started. In a process
    started by :func:`main` the line is written at exit, after click's error message or the
    traceback, so it is the last line; otherwise (tests calling the group) at once."""
    session = sys.modules.get("auditor.spark.session")
    path = session.spark_log_path() if session is not None else None
    if path is None:
        return
    line = f"txn-audit: Spark's and the JVM's log of this run: {path}\n"
    if not _AT_EXIT["process"]:
        sys.stderr.write(line)
    elif not _AT_EXIT["registered"]:
        import atexit

        _AT_EXIT["registered"] = True
        atexit.register(lambda: (sys.stderr.write(line), sys.stderr.flush()))


def _root_group(group_cls):
    """The ``txn-audit`` group itself (its options and help), of the lazy class :func:`_build_cli` makes."""
    import click

    @click.group(cls=group_cls, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name=_PROG)
    @click.option("--verbose", "-v", is_flag=True,
                  help="Show Spark's and the JVM's log lines on stderr (default: in a log file, named on failure).")
    def cli(verbose: bool) -> None:
        """Offline auditor for Apache Kafka transactions.

        \b
        Examples:
          txn-audit scan /var/lib/kafka/data              # ingest, audit, report
          txn-audit scan broker-*/ --format html --exit-zero > r.html
          txn-audit ingest /var/lib/kafka/data --out tables
          txn-audit audit tables --out findings && txn-audit report findings
          txn-audit dump 00000000000000000000.log | jq .

        \b
        Exit status: 0 ok, 1 findings at or above --fail-on (ingest, dump:
        damaged input files), 2 usage error or unusable input, 3 batch
        warehouse busy, or only findings a --baseline had remain. See
        docs/operations.md.
        """
        if verbose:
            os.environ[_VERBOSE_ENV] = "1"

    return cli


def _build_cli():
    import click

    class _LazyGroup(click.Group):
        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted({*super().list_commands(ctx), *_COMMANDS})

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            if cmd_name not in self.commands and cmd_name in _COMMANDS:
                module, attr = _COMMANDS[cmd_name]
                cmd = getattr(importlib.import_module(module), attr)
                if cmd_name == "dump":
                    cmd = _checked_dump(cmd)
                self.add_command(cmd, cmd_name)
            return super().get_command(ctx, cmd_name)

        def invoke(self, ctx: click.Context):
            from auditor.errors import EngineStartError, OutputError

            try:
                return super().invoke(ctx)
            except (OutputError, EngineStartError) as exc:  # an output directory that cannot be written,
                from auditor.report.console import safe  # a driver JVM that did not start: one line, status 2

                _log_hint()
                raise _OutputFailure(safe(str(exc), markup=False)) from None
            except click.ClickException as exc:
                if exc.exit_code >= 2:
                    _log_hint()
                raise
            except SystemExit as exc:
                if isinstance(exc.code, int) and exc.code >= 2:
                    _log_hint()
                raise
            except (click.exceptions.Exit, click.Abort, KeyboardInterrupt):
                raise
            except Exception:  # noqa: BLE001 - an internal error: its traceback follows, and the JVM's log
                _log_hint()
                raise

    def _checked_dump(cmd: click.Command) -> click.Command:
        """``dump`` with its FILES checked first: a path that does not exist is bad input (status 2)."""
        inner = cmd.callback

        def callback(*args, **kwargs):
            files = kwargs.get("files") or ()
            gone = _missing(files)
            if gone and len(gone) == len(files):
                raise _InputFailure(_dump_missing_message(gone))
            return inner(*args, **kwargs)

        cmd.callback = callback
        return cmd

    class _InputFailure(click.ClickException):
        exit_code = 2

    class _OutputFailure(click.ClickException):
        exit_code = 2

    return _root_group(_LazyGroup)


def _group():
    group = globals().get("cli")
    if group is None:
        group = globals()["cli"] = _build_cli()
    return group


def __getattr__(name: str):
    if name == "cli":  # ``from auditor.cli.main import cli``: the click group, built once, on first use
        return _group()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _plain_dump(args: list[str]) -> tuple[list[str], bool] | None:
    """``(files, records)`` when ``args`` is ``dump`` with files and at most ``--records``,
    every file one click's ``Path()`` accepts as it is; otherwise None (click decides)."""
    if len(args) < 2 or args[0] != "dump" or f"_{_PROG.replace('-', '_').upper()}_COMPLETE" in os.environ:
        return None
    files: list[str] = []
    records = False
    for a in args[1:]:
        if a == "--records":
            records = True
        elif not a or a.startswith("-"):
            return None  # another option, "--", "-" (stdin), "": click's to parse or refuse
        else:
            # click.Path() (readable=True) refuses an existing path it may not read: let it say so
            if os.path.lexists(a) and not os.access(a, os.R_OK):
                return None
            files.append(a)
    return (files, records) if files else None


def _run_plain_dump(files: list[str], records: bool) -> None:
    """The plain ``dump`` without click: ~20 ms less CPU per process than through it (click's
    import; bench/dump_startup.py, bench/README.md), with click's standalone behaviour kept."""
    from auditor.dump import run

    try:
        run(files, "jsonl", records, own_process=True)
    except (EOFError, KeyboardInterrupt):
        sys.stderr.write("\nAborted!\n")  # what click's standalone mode writes
        sys.exit(1)
    except OSError as exc:
        import errno

        if exc.errno != errno.EPIPE:
            raise
        # the reader went away (``| head``): as click does, status 1 and no complaint
        # when the interpreter flushes stdout at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)


def main() -> None:
    plain = _plain_dump(sys.argv[1:])
    if plain is not None:
        gone = _missing(plain[0])
        if gone and len(gone) == len(plain[0]):  # what the click path says (_checked_dump), without click
            sys.stderr.write(f"Error: {_dump_missing_message(gone)}\n")
            sys.exit(2)
        _run_plain_dump(*plain)
    _AT_EXIT["process"] = True
    _group()(prog_name=_PROG)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
