"""``txn-audit``: the command line (click + rich).

Results go to stdout, diagnostics to stderr. Exit status: 0 clean, 1 some input
was bad (decoded as far as possible, see the files table), 2 usage errors or
nothing readable.
"""

from __future__ import annotations

import sys

import click

from auditor import __version__
from auditor.cli.ingest_cmd import ingest_cmd, tables_cmd
from auditor.cli.dump_cmd import dump_cmd
from auditor.cli.forensics_cmd import coordinator_cmd, timeline_cmd
from auditor.cli.audit_cmd import audit_cmd, explain_cmd, rules_cmd, scan_cmd
from auditor.cli.report_cmd import report_cmd
from auditor.cli.batch_cmd import batch_cmd


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="txn-audit")
def cli() -> None:
    """Offline auditor for Apache Kafka transactions."""


cli.add_command(ingest_cmd)
cli.add_command(tables_cmd)
cli.add_command(dump_cmd)
cli.add_command(batch_cmd)
cli.add_command(timeline_cmd)
cli.add_command(coordinator_cmd)
cli.add_command(report_cmd)
for _cmd in (scan_cmd, audit_cmd, rules_cmd, explain_cmd):
    cli.add_command(_cmd)


def main() -> None:
    cli(prog_name="txn-audit")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
