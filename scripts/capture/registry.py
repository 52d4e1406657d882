"""The scenarios and how they are found: each family module registers its scenarios with
:func:`scenario` when imported; :func:`all_scenarios` imports the families in :data:`FAMILIES` order,
which is the order ``--list`` shows and a full run captures in."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from scripts.capture.context import Ctx

FAMILIES = ("transactions", "groups", "producers", "two_phase_commit", "clusters", "compaction",
            "legacy_formats", "releases", "tiered_storage")


@dataclass
class Scenario:
    """One capture: the Kafka version and broker setup it runs on and the function that drives it
    (it returns the scenario's part of expected.json: ``description``, ``expect``, ``steps``...)."""

    name: str
    version: str
    run: Callable[[Ctx], dict]
    overrides: dict = field(default_factory=dict)
    features: dict | None = None
    base: str | None = None  # mutated scenarios: the capture they derive from
    brokers: int = 1  # > 1: a KafkaCluster of that many combined broker+controller nodes
    node_overrides: dict | None = None  # {node_id: {property: value}} for one node of a cluster
    zookeeper: bool = False  # a ZooKeeper-mode broker (3.x) with its own ZooKeeper, not KRaft
    keep_preallocated_indexes: bool = False  # copy >= 1 MiB preallocated .index/.timeindex files too
    prepare: Callable[[], None] | None = None  # run before the broker is formatted (e.g. fetch a plugin jar)


SCENARIOS: dict[str, Scenario] = {}


def scenario(name: str, version: str, **kw):
    """Register the decorated function as scenario ``name`` (keywords: the :class:`Scenario` fields)."""

    def deco(fn):
        SCENARIOS[name] = Scenario(name, version, fn, **kw)
        return fn

    return deco


def all_scenarios() -> dict[str, Scenario]:
    """Every scenario, in :data:`FAMILIES` order and within a family in the order its module defines
    them, whichever module was imported first (importing a family registers its scenarios)."""
    for family in FAMILIES:
        importlib.import_module(f"scripts.capture.{family}")
    rank = {f"scripts.capture.{family}": i for i, family in enumerate(FAMILIES)}
    return dict(sorted(SCENARIOS.items(), key=lambda kv: rank.get(kv[1].run.__module__, len(FAMILIES))))
