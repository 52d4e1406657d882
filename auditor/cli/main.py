"""``txn-audit``: the command line (click + rich).

Results go to stdout, diagnostics to stderr. Exit status: 0 clean, 1 some input
was bad (decoded as far as possible, see the files table), 2 usage errors or
nothing readable.
"""

from __future__ import annotations

import sys

import importlib

import click

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


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMANDS:
            module, attr = _COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(module), attr), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="txn-audit")
def cli() -> None:
    """Offline auditor for Apache Kafka transactions."""


def main() -> None:
    cli(prog_name="txn-audit")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
