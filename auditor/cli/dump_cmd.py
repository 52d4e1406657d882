"""``txn-audit dump`` (filled in below)."""
import click


@click.command("dump")
def dump_cmd() -> None:
    """Placeholder."""
