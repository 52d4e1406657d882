"""The import graph of the ``auditor`` package has no cycle among its module-level imports.

Why: a cycle among module-level imports makes the outcome of ``import x`` depend on which
module of the cycle some caller happened to import first (a half-initialised module, a name
missing "sometimes"), and it ties modules together that the layout says are apart (the
Spark session and the performance machinery, the audit engine and the report layer).
Imports inside a function run when the function is called, after every module is loaded,
so they cannot fail that way: they are listed apart (``function``); a cycle through them is
refused too (a layering slip), by its own test. Imports
under ``if TYPE_CHECKING:`` never run and are left out.

The graph is built from the source (``ast``), not by importing: every module of
``auditor/`` (``auditor.rules`` included) is a node; ``import a.b.c`` and
``from a.b import c`` are edges to the module named (``a.b.c`` when it is a module, else
the package ``a.b``) and to the packages above it, whose ``__init__`` runs first.
"""

from __future__ import annotations

import ast
import sys
from functools import lru_cache
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
# dotted name -> folder: the top-level ``rules/`` folder is installed as ``auditor.rules`` (setup.py)
ROOT_PACKAGES = {"auditor": "auditor", "auditor.rules": "rules"}


def modules(project: Path = PROJECT) -> dict[str, Path]:
    """Every module of the root packages by dotted name (a package by its name, its file
    ``__init__.py``)."""
    out: dict[str, Path] = {}
    for name, folder in ROOT_PACKAGES.items():
        for path in sorted((project / folder).rglob("*.py")):
            parts = [name, *path.relative_to(project / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, module: str, is_package: bool):
    """``(imported name, level)`` pairs of ``tree``: level is "module" or "function"."""
    found: list[tuple[str, str]] = []

    def visit(node: ast.AST, level: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(ast.Module(body=[sub], type_ignores=[]), level)
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, "function")
                continue
            if isinstance(child, ast.Import):
                found.extend((a.name, level) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolved against this module's package
                    pkg = module.split(".") if is_package else module.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (child.level - 1)]
                    base = ".".join(pkg + ([base] if base else []))
                found.extend((f"{base}.{a.name}" if a.name != "*" else base, level) for a in child.names)
                found.append((base, level))
            visit(child, level)

    visit(tree, "module")
    return found


def _target(name: str, known: dict[str, Path]) -> str | None:
    """The module of ours that importing ``name`` runs: the longest known prefix."""
    parts = name.split(".")
    while parts:
        cand = ".".join(parts)
        if cand in known:
            return cand
        parts.pop()
    return None


@lru_cache(maxsize=None)
def import_graph(project: Path = PROJECT) -> dict[str, dict[str, set[str]]]:
    """``{"module": {importer: {imported...}}, "function": {...}}`` over the root packages."""
    known = modules(project)
    graph: dict[str, dict[str, set[str]]] = {"module": {m: set() for m in known}, "function": {m: set() for m in known}}
    for mod, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        for name, level in _imports(tree, mod, path.name == "__init__.py"):
            tgt = _target(name, known)
            if tgt is None:
                continue
            parts = tgt.split(".")
            for i in range(1, len(parts) + 1):  # the packages above run their __init__ first
                dep = ".".join(parts[:i])
                if dep != mod and dep in known and not mod.startswith(dep + "."):
                    graph[level][mod].add(dep)
    return graph


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        work = [(v, iter(sorted(edges.get(v, ()))))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            strong(v)
    return sorted(out)


def test_the_graph_sees_known_edges():
    """The builder finds a module-level and a function-level import that are there (so an
    empty cycle list means no cycle, not a blind graph)."""
    g = import_graph()
    assert "auditor.ingest.tables" in g["module"]["auditor.ingest.envelope"]
    assert "auditor.engine.rule" in g["module"]["auditor.rules.hanging_transaction"]
    assert sum(len(v) for v in g["function"].values()) > 50


def test_cycles_are_found():
    """The cycle finder reports a two-module and a three-module cycle and nothing acyclic."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_cycle_among_module_level_imports():
    assert cycles(import_graph()["module"]) == []


def test_no_cycle_through_function_level_imports_either():
    """None today (the last one, ``dump._native`` <-> ``dump._run``, went when ``record_object``
    moved to ``dump._lines``): a deferred import that closes a cycle is a layering slip even
    when it cannot half-initialise a module."""
    g = import_graph()
    assert cycles({m: g["module"][m] | g["function"][m] for m in g["module"]}) == []


def test_only_the_cli_imports_the_cli():
    """Data flows one way (files -> tables -> findings -> reports), the commands on top: no
    decoder, engine, report or dump module reaches up into ``auditor.cli`` (the shared rich
    consoles are the report layer's, ``auditor.report.console``)."""
    g = import_graph()
    up = {m: sorted(d for d in g["module"][m] | g["function"][m] if d == "auditor.cli" or d.startswith("auditor.cli."))
          for m in g["module"] if not (m == "auditor.cli" or m.startswith("auditor.cli."))}
    assert {m: d for m, d in up.items() if d} == {}


def test_lower_packages_do_not_reach_up():
    """Module- or function-level: the model reads tables through ``auditor.tables``, not the engine;
    the performance machinery never imports the session it tunes (the archive's training run is
    ``auditor.cli.jvmcache_train``); ``auditor.tables`` imports nothing of ours; ingest (the scan's
    table cache included) imports neither the engine nor the commands."""
    g = import_graph()
    banned = {"auditor.model": ("auditor.engine",), "auditor.perf": ("auditor.spark",),
              "auditor.tables": ("auditor.",), "auditor.ingest": ("auditor.engine", "auditor.cli")}

    def under(m: str, pkg: str) -> bool:
        return m.startswith(pkg) if pkg.endswith(".") else m == pkg or m.startswith(pkg + ".")

    up = {m: sorted(d for d in g["module"][m] | g["function"][m] if any(under(d, b) for b in no) and not under(d, low))
          for low, no in banned.items() for m in g["module"] if under(m, low)}
    assert {m: d for m, d in up.items() if d} == {}


ARCHITECTURE = PROJECT / "docs" / "architecture.md"


def _doc_tables() -> tuple[dict[str, int], set[tuple[str, str]]]:
    """docs/architecture.md's layers (package -> layer) and its *Against the grain* pairs."""
    import re

    layers: dict[str, int] = {}
    against: set[tuple[str, str]] = set()
    section = ""
    for line in ARCHITECTURE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:]
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        names = [re.fullmatch(r"`(auditor(?:\.\w+)?)`", c) for c in cells[:2]]
        if section == "The layers" and len(cells) >= 2 and cells[0].isdigit() and names[1]:
            layers[names[1].group(1)] = int(cells[0])
        elif section == "Against the grain" and len(cells) >= 2 and names[0] and names[1]:
            against.add((names[0].group(1), names[1].group(1)))
    return layers, against


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_imports_follow_the_documented_layers():
    """Every import (module- or function-level) between packages goes down a layer of
    docs/architecture.md, or is one of the page's *Against the grain* pairs, which must all still
    exist (a pair that is gone is taken off the page); every package is on the page."""
    layers, against = _doc_tables()
    g = import_graph()
    packages = {_package(m) for m in g["module"] if m != "auditor"}
    assert packages == set(layers), f"packages not on the page: {sorted(packages - set(layers))}, " \
                                    f"on the page but gone: {sorted(set(layers) - packages)}"
    up: dict[tuple[str, str], list[str]] = {}
    for kind in ("module", "function"):
        for m, deps in g[kind].items():
            for d in deps:
                a, b = _package(m), _package(d)
                if a in layers and b in layers and layers[b] > layers[a]:
                    up.setdefault((a, b), []).append(f"{m} -> {d}")
    assert {k: v for k, v in up.items() if k not in against} == {}
    assert against <= set(up), f"listed against the grain but gone: {sorted(against - set(up))}"


def main() -> int:
    g = import_graph()
    both = {m: g["module"][m] | g["function"][m] for m in g["module"]}
    print(f"{len(g['module'])} modules; {sum(map(len, g['module'].values()))} module-level and "
          f"{sum(map(len, g['function'].values()))} function-level import edges")
    for title, edges in (("module-level", g["module"]), ("module- and function-level", both)):
        found = cycles(edges)
        print(f"cycles among {title} imports: {len(found)}")
        for c in found:
            print("  " + " <-> ".join(c))
    return 0


if __name__ == "__main__":
    sys.exit(main())
