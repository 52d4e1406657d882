"""Digests of the code the kept tables and a warehouse's contents depend on.

``scan`` reuses the tables and findings it kept, and the batch job skips work
whose inputs did not change: a file already decoded at its fingerprint, an audit
of tables that hold what they held last run. That is only sound while the code
that did the work is the same. An upgrade of the
tool that changes a decoder must re-decode files decoded by the old one, and a
change to a rule or a shared view must re-run the audit. So the ledger records
the *decoder digest* each file was decoded with, and the run records an *audit
digest*; both hash the source of whole packages, not a hand-kept list of
modules, so a change anywhere in them counts.

Sources are read through the import system's loaders, so this works the same
for a checkout, an installed wheel and a zip shipped with ``--py-files``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
from functools import lru_cache

# what the decoded tables depend on: the format decoders, discovery and task planning,
# the table catalog and the Spark side of ingestion (all in auditor.ingest)
DECODER_MODULES = ("auditor.formats", "auditor.ingest", "auditor.batch.decode")
# what the findings depend on, given the tables: the rules, the audit engine, the domain model, how
# the tables' rows are read without Spark, the session's settings and the Spark tuning the queries
# run under, the report data saved with them
AUDIT_MODULES = ("auditor.rules", "auditor.engine", "auditor.model", "auditor.tables", "auditor.spark",
                 "auditor.perf", "auditor.report.spark", "auditor.batch.delta_rules")


def _module_names(name: str) -> list[str]:
    """``name`` and, for a package, every module below it, sorted."""
    mod = importlib.import_module(name)
    names = [name]
    path = getattr(mod, "__path__", None)
    if path is not None:
        for info in pkgutil.walk_packages(path, prefix=name + "."):
            names.append(info.name)
    return sorted(names)


def _source(name: str) -> bytes:
    spec = importlib.util.find_spec(name)
    loader = spec.loader if spec else None
    try:
        src = loader.get_source(name) if loader is not None else None  # type: ignore[union-attr]
    except (ImportError, OSError):
        src = None
    return (src if src is not None else f"<no source: {name}>").encode()


@lru_cache(maxsize=None)
def source_digest(modules: tuple[str, ...]) -> str:
    """BLAKE2b over the names and source text of ``modules`` and all their submodules."""
    h = hashlib.blake2b(digest_size=16)
    for top in modules:
        for name in _module_names(top):
            h.update(name.encode() + b"\0")
            h.update(_source(name) + b"\0")
    return h.hexdigest()


def decoder_digest() -> str:
    return source_digest(DECODER_MODULES)


def audit_digest() -> str:
    return source_digest(AUDIT_MODULES)
