"""``txn-audit``: the command line (click + rich).

Results go to stdout, diagnostics to stderr. Exit status: 0 clean, 1 some input
was bad (decoded as far as possible, see the files table), 2 usage errors,
nothing readable, or an output directory that cannot be written (read-only,
no permission, disk full: one line naming it, and nothing in it replaced).

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
    "rules": ("auditor.cli.audit_cmd", "rules_cmd"),
    "explain": ("auditor.cli.audit_cmd", "explain_cmd"),
}
_PROG = "txn-audit"


def _build_cli():
    import click

    class _LazyGroup(click.Group):
        def list_commands(self, ctx: click.Context) -> list[str]:
            return sorted({*super().list_commands(ctx), *_COMMANDS})

        def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
            if cmd_name not in self.commands and cmd_name in _COMMANDS:
                module, attr = _COMMANDS[cmd_name]
                self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
            return super().get_command(ctx, cmd_name)

        def invoke(self, ctx: click.Context):
            from auditor.errors import OutputError

            try:
                return super().invoke(ctx)
            except OutputError as exc:  # an output directory that cannot be written: one line, status 2
                from auditor.cli.console import safe

                raise _OutputFailure(safe(str(exc), markup=False)) from None

    class _OutputFailure(click.ClickException):
        exit_code = 2

    @click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
    @click.version_option(__version__, prog_name=_PROG)
    def cli() -> None:
        """Offline auditor for Apache Kafka transactions."""

    return cli


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
    import gc

    # Start-up (numpy's import above all) allocates a few hundred thousand objects and
    # frees few: the collector would walk them over and over (~3% of a 1 GiB dump) to
    # find no cycle. It is off while dump's modules load, and on again for the dump,
    # with what was loaded set aside (frozen).
    gc.disable()
    try:
        from auditor.cli import dump_run

        dump_run.preload()
    finally:
        gc.freeze()
        gc.enable()
    try:
        dump_run.run(files, "jsonl", records)
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
        _run_plain_dump(*plain)
    _group()(prog_name=_PROG)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
