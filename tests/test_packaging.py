"""What ships: the wheel the Dockerfile builds, the CLI run from that wheel alone, and the Dockerfile.

No Docker engine here, so the image itself is not built: the wheel is built the way the Dockerfile's
first stage builds it (``pip wheel`` of exactly the files that stage COPYs), run from an unzipped copy
with the repository out of reach, and the Dockerfile is checked statically against the files,
scripts and settings it relies on.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import json
import posixpath
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import PROJECT
from scripts import package_zip

PYPROJECT = tomllib.loads((PROJECT / "pyproject.toml").read_text())
DIST = PYPROJECT["project"]["name"]
# the wheel's one top-level package; the top-level rules/ folder ships inside it as auditor.rules
PACKAGES = ("auditor",)


# ---------------------------------------------------------------------------------------------------
# The Dockerfile, parsed


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        instr, _, args = buf.strip().partition(" ")
        out.append((instr.upper(), args.strip()))
        buf = ""
    assert not buf, f"Dockerfile ends inside a continued line: {buf!r}"
    return out


class Stage:
    def __init__(self, image: str, name: str | None):
        self.image, self.name = image, name
        self.workdir = "/"
        self.items: list[tuple[str, str, str]] = []  # (instruction, arguments, workdir at that point)

    def all(self, instr: str) -> list[tuple[str, str]]:
        return [(a, wd) for i, a, wd in self.items if i == instr]


def _stages(text: str) -> tuple[list[Stage], dict[str, str]]:
    stages: list[Stage] = []
    args: dict[str, str] = {}  # ARGs before the first FROM (usable in FROM)
    for instr, rest in _instructions(text):
        if instr == "FROM":
            toks = [t for t in rest.split() if not t.startswith("--")]
            name = toks[2] if len(toks) >= 3 and toks[1].lower() == "as" else None
            image = re.sub(r"\$\{?(\w+)\}?", lambda m: args.get(m.group(1), m.group(0)), toks[0])
            stages.append(Stage(image, name))
        elif not stages:
            if instr == "ARG":
                k, _, v = rest.partition("=")
                args[k.strip()] = v.strip().strip('"')
        else:
            st = stages[-1]
            if instr == "WORKDIR":
                st.workdir = posixpath.normpath(posixpath.join(st.workdir, rest.strip('"')))
            st.items.append((instr, rest, st.workdir))
    return stages, args


def _copy(args: str) -> tuple[dict[str, str], list[str], str]:
    """A COPY/ADD's flags, sources and destination (shell or JSON form)."""
    toks = shlex.split(args)
    flags = {}
    while toks and toks[0].startswith("--"):
        k, _, v = toks.pop(0)[2:].partition("=")
        flags[k] = v
    if toks and toks[0].startswith("["):
        toks = json.loads(" ".join(toks))
    assert len(toks) >= 2, f"COPY needs a source and a destination: {args!r}"
    return flags, toks[:-1], toks[-1]


def _dest(dest: str, workdir: str) -> str:
    return posixpath.normpath(posixpath.join(workdir, dest))


def _exec_form(args: str) -> list[str]:
    return json.loads(args) if args.startswith("[") else shlex.split(args)


def _env(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args, _ in stage.all("ENV"):
        toks = shlex.split(args)
        if all("=" in t for t in toks):
            env.update(t.split("=", 1) for t in toks)
        else:  # legacy `ENV KEY value with spaces`
            env[toks[0]] = " ".join(toks[1:])
    return env


DOCKERFILE = (PROJECT / "Dockerfile").read_text()
STAGES, _ARGS = _stages(DOCKERFILE)
STAGE = {s.name: s for s in STAGES if s.name}
RUNTIME = STAGES[-1]


def _stage_copying(path: str) -> tuple[Stage, str]:
    """The stage that COPYs ``path`` from the build context, and where that file lands in the image."""
    for st in STAGES:
        for args, wd in st.all("COPY"):
            flags, srcs, dest = _copy(args)
            if "from" not in flags and path in srcs:
                d = _dest(dest, wd)
                return st, (posixpath.join(d, posixpath.basename(path))
                            if dest.endswith("/") or len(srcs) > 1 else d)
    raise AssertionError(f"no stage COPYs {path}")


# ---------------------------------------------------------------------------------------------------
# The wheel


def _expected_modules() -> set[str]:
    """Every module of the source tree at its import path (rules/x.py ships as auditor/rules/x.py)."""
    return {f"{target}/{p.relative_to(PROJECT / folder).as_posix()}"
            for folder, target in package_zip.LAYOUT.items()
            for p in (PROJECT / folder).rglob("*.py") if "__pycache__" not in p.parts}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The project's wheel, built like the Dockerfile's wheels stage builds it: from a context holding
    only what that stage COPYs (so nothing else of the checkout, e.g. a stale build/lib, leaks in),
    with the venv's own build backend (no build isolation: no network)."""
    wheels = STAGE["wheels"]
    ctx = tmp_path_factory.mktemp("context")
    for args, wd in wheels.all("COPY"):
        flags, srcs, _ = _copy(args)
        assert "from" not in flags
        for s in srcs:
            src = PROJECT / s
            if src.is_dir():
                shutil.copytree(src, ctx / s, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                (ctx / s).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, ctx / s)
    out = tmp_path_factory.mktemp("wheels")
    # --check-build-dependencies: the venv's setuptools must satisfy [build-system] requires
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "--check-build-dependencies",
         "--no-cache-dir", "--no-index", "--wheel-dir", str(out), str(ctx)],
        capture_output=True, text=True, cwd=ctx, timeout=180)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    # a deprecated setting is a build that a future setuptools (Docker builds with the newest) refuses
    assert "BuildBackendWarning" not in log and "SetuptoolsDeprecationWarning" not in log, log[-4000:]
    built = list(out.glob("*.whl"))
    assert len(built) == 1, built
    assert built[0].name.startswith(DIST.replace("-", "_") + "-" + PYPROJECT["project"]["version"] + "-")
    return built[0]


def _dist_info(names: list[str]) -> str:
    infos = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
    assert len(infos) == 1, infos
    return infos.pop()


def test_wheel_holds_every_module_of_the_source_tree(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    expected = _expected_modules()
    assert {"auditor/__init__.py", "auditor/rules/__init__.py", "auditor/cli/main.py"} <= expected
    assert "auditor/rules/examples.json" in names  # package data `txn-audit explain` reads
    shipped = {n for n in names if n.split("/")[0] in PACKAGES and n.endswith(".py")}
    assert sorted(expected - shipped) == [], "modules missing from the wheel"
    assert sorted(shipped - expected) == [], "modules in the wheel that the source tree does not have"
    tops = {n.split("/")[0] for n in names} - {_dist_info(names)}
    assert tops == set(PACKAGES)


def test_spark_submit_zip_holds_what_the_wheel_holds(wheel, tmp_path):
    """``make zip`` (scripts/package_zip.py) lays the code out as the wheel does (setup.py's
    ``package_dir``): the same modules and package data at the same import paths."""
    shipped = {n for n in zipfile.ZipFile(wheel).namelist() if n.split("/")[0] in PACKAGES
               and (n.endswith(".py") or n.rsplit("/", 1)[-1] in package_zip.PACKAGE_DATA)}
    zipped = set(zipfile.ZipFile(package_zip.code_zip(tmp_path / "code.zip")).namelist())
    assert zipped == shipped


def test_wheel_declares_the_console_script(wheel):
    z = zipfile.ZipFile(wheel)
    ep = configparser.ConfigParser(delimiters=("=",))
    ep.optionxform = str
    ep.read_string(z.read(f"{_dist_info(z.namelist())}/entry_points.txt").decode())
    scripts = PYPROJECT["project"]["scripts"]
    assert scripts["txn-audit"] == "auditor.cli.main:main"
    assert dict(ep["console_scripts"]) == scripts
    meta = z.read(f"{_dist_info(z.namelist())}/METADATA").decode()
    assert f"Requires-Python: {PYPROJECT['project']['requires-python']}" in meta
    for dep in PYPROJECT["project"]["dependencies"]:
        assert f"Requires-Dist: {dep}" in meta


# ---------------------------------------------------------------------------------------------------
# The CLI from the unzipped wheel alone

_PROBE = r"""
import json, sys
sys.path.append(SITE)  # the venv's dependencies, after PYTHONPATH (the unzipped wheel); no .pth files run
what = sys.argv[1]
if what == "discover":
    import importlib.util
    import auditor, auditor.rules as rules
    from auditor.engine.rule import discover
    found = discover()
    print(json.dumps({
        "files": [auditor.__file__, rules.__file__]
                 + [sys.modules[r.run.__module__].__file__ for r in found],
        "ids": [r.id for r in found],
        "top_level_rules": importlib.util.find_spec("rules") is not None,
        "meta_path": [repr(f) for f in sys.meta_path],
    }))
else:  # what the installed `txn-audit` console script does, with the wheel's own entry point
    import importlib.metadata as md
    dist = md.distribution(DIST)
    (ep,) = [e for e in dist.entry_points if e.group == "console_scripts" and e.name == "txn-audit"]
    main = ep.load()
    print(json.dumps({"dist": str(dist.locate_file("")), "main": sys.modules[main.__module__].__file__}),
          file=sys.stderr)
    sys.argv = ["txn-audit", *sys.argv[2:]]
    sys.exit(main())
"""


@pytest.fixture(scope="module")
def unzipped(wheel, tmp_path_factory) -> tuple[Path, Path]:
    site = tmp_path_factory.mktemp("unzipped")
    zipfile.ZipFile(wheel).extractall(site)
    work = tmp_path_factory.mktemp("cwd")
    probe = work / "probe.py"
    probe.write_text(f"SITE = {sysconfig.get_paths()['purelib']!r}\nDIST = {DIST!r}\n" + _PROBE)
    return site, work


def _run_from_wheel(unzipped, *args) -> subprocess.CompletedProcess:
    """``python -S`` skips site, so the venv's .pth files (the editable install's finder, which maps
    ``auditor`` and ``auditor.rules`` to this checkout) never run; PYTHONPATH is the unzipped wheel only."""
    site, work = unzipped
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(work)}
    return subprocess.run([sys.executable, "-S", str(work / "probe.py"), *args], capture_output=True, text=True,
                          cwd=work, env=env, timeout=120)


def _source_ids() -> list[str]:
    import auditor.rules as rules
    from auditor.engine.rule import discover

    assert Path(rules.__file__).resolve().parent == PROJECT / "rules"
    return [r.id for r in discover()]


def test_rules_discovered_from_the_wheel_alone(unzipped):
    site, _ = unzipped
    proc = _run_from_wheel(unzipped, "discover")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    for f in got["files"]:
        assert Path(f).resolve().is_relative_to(site.resolve()), f"{f} imported from outside the wheel"
    assert not any("Editable" in f or "__editable__" in f for f in got["meta_path"]), got["meta_path"]
    assert not got["top_level_rules"], "the wheel installs a top-level `rules` module"
    ids = _source_ids()
    assert len(ids) >= 10
    assert got["ids"] == ids


def test_txn_audit_rules_from_the_wheel_alone(unzipped):
    site, _ = unzipped
    proc = _run_from_wheel(unzipped, "cli", "rules")
    assert proc.returncode == 0, proc.stderr[-3000:]
    where = json.loads(proc.stderr.strip().splitlines()[0])
    assert Path(where["dist"]).resolve() == site.resolve()
    assert Path(where["main"]).resolve() == (site / "auditor" / "cli" / "main.py").resolve()
    rows = [line.split("│") for line in proc.stdout.splitlines() if line.startswith("│")]
    # a rule's row names it in the first cell; its kinds' rows below it are indented
    ids = [cells[1].strip() for cells in rows if cells[1].strip() and not cells[1].startswith("  ")]
    assert ids == _source_ids(), proc.stdout


def test_txn_audit_explain_from_the_wheel_alone(unzipped):
    """The example of a rule's page comes from rules/examples.json: package data the wheel must carry."""
    proc = _run_from_wheel(unzipped, "cli", "explain", "hanging-transaction")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Example" in proc.stdout and "From the case tests/rules/hanging-transaction/" in proc.stdout, proc.stdout
    assert "(no example case)" not in proc.stdout


# ---------------------------------------------------------------------------------------------------
# The Dockerfile


def _dockerignored(path: str) -> bool:
    f = PROJECT / ".dockerignore"
    patterns = [p.strip() for p in f.read_text().splitlines()] if f.is_file() else []
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for pat in patterns:
        if not pat or pat.startswith("#"):
            continue
        neg = pat.startswith("!")
        pat = pat.lstrip("!").strip("/")
        if any(fnmatch.fnmatchcase(p, pat) for p in prefixes):
            ignored = not neg
    return ignored


def test_dockerfile_copy_sources_exist_and_are_in_the_context():
    sources = []
    for st in STAGES:
        for instr in ("COPY", "ADD"):
            for args, _ in st.all(instr):
                flags, srcs, _ = _copy(args)
                if "from" not in flags:
                    sources += srcs
    assert {"pyproject.toml", "auditor", "rules", "scripts/delta/fetch.sh"} <= set(sources)
    for s in sources:
        assert not Path(s).is_absolute() and ".." not in Path(s).parts, s
        assert (PROJECT / s).exists(), f"COPY {s}: not in the repository"
        assert not _dockerignored(s), f"COPY {s}: excluded from the build context by .dockerignore"
    # pyproject's readme is read by the build: it must be in the wheels stage too
    wheel_srcs = {s for args, _ in STAGE["wheels"].all("COPY") for s in _copy(args)[1]}
    assert PYPROJECT["project"]["readme"] in wheel_srcs


def test_dockerfile_base_images_are_pinned():
    names: set[str] = set()
    for st in STAGES:
        if st.image in names:  # FROM an earlier stage
            continue
        assert "$" not in st.image, f"FROM {st.image}: unresolved build argument"
        ref, _, digest = st.image.partition("@")
        last = ref.rsplit("/", 1)[-1]
        tag = last.partition(":")[2]
        assert digest.startswith("sha256:") or (tag and tag != "latest" and re.match(r"\d+\.\d+", tag)), \
            f"FROM {st.image}: not pinned to a version"
        if st.name:
            names.add(st.name)
    assert len(STAGES) == 3 and RUNTIME.name is None


def test_dockerfile_entrypoint_is_the_console_script():
    (args,) = [a for a, _ in RUNTIME.all("ENTRYPOINT")]
    cmd = _exec_form(args)
    assert cmd[0] == "txn-audit" and cmd[0] in PYPROJECT["project"]["scripts"]
    # the script comes from the wheel built in the wheels stage and installed in the runtime stage
    (wheel_run,) = [a for a, _ in STAGE["wheels"].all("RUN") if "pip wheel" in a]
    wheel_dir = re.search(r"--wheel-dir[ =](\S+)", wheel_run).group(1)
    froms = [_copy(a) for a, _ in RUNTIME.all("COPY") if _copy(a)[0].get("from") == "wheels"]
    assert [(f[1], f[2]) for f in froms] == [([wheel_dir], wheel_dir)]
    assert any(re.search(rf"pip install .*{re.escape(wheel_dir)}/\*\.whl", a) for a, _ in RUNTIME.all("RUN"))


def _fetch_script() -> dict[str, str]:
    text = (PROJECT / "scripts/delta/fetch.sh").read_text()
    m = {
        "root": re.search(r'^ROOT=\$\(cd "\$HERE/([^"]*)" && pwd\)$', text, re.M),
        "dest": re.search(r'^DEST="\$ROOT/([^"]+)"$', text, re.M),
        "pom": re.search(r'-f "\$HERE/([^"]+)"', text),
        "version": re.search(r"^VERSION=\$\{1:-([^}]+)\}", text, re.M),
    }
    assert all(m.values()), {k: bool(v) for k, v in m.items()}
    assert re.search(r'^HERE=\$\(cd "\$\(dirname "\$0"\)" && pwd\)$', text, re.M)
    out = {k: v.group(1) for k, v in m.items()}
    out["jars"] = re.findall(r'"\$DEST"/(\S+\.jar)', text)
    return out


def test_dockerfile_copies_the_jars_fetch_sh_writes():
    fetch = _fetch_script()
    stage, script = _stage_copying("scripts/delta/fetch.sh")
    assert stage is STAGE["jars"]
    here = posixpath.dirname(script)
    _, pom = _stage_copying("scripts/delta/" + fetch["pom"])
    assert posixpath.dirname(pom) == here, "pom.xml must sit beside fetch.sh in the image"
    dest = posixpath.normpath(posixpath.join(here, fetch["root"], fetch["dest"]))
    # the stage runs the script it copied, with the default Delta version
    (run,) = [(a, wd) for a, wd in stage.all("RUN") if "fetch.sh" in a]
    toks = shlex.split(run[0].split("&&")[0])
    i = next(i for i, t in enumerate(toks) if t.endswith("fetch.sh"))
    assert _dest(toks[i], run[1]) == script
    version = toks[i + 1] if len(toks) > i + 1 else fetch["version"]
    (jars_copy,) = [_copy(a) for a, _ in RUNTIME.all("COPY") if _copy(a)[0].get("from") == "jars"]
    _, (src,), jars_dest = jars_copy
    assert posixpath.normpath(src) == dest
    # TXN_AUDIT_DELTA_JARS names where they land
    assert posixpath.normpath(_env(RUNTIME)["TXN_AUDIT_DELTA_JARS"]) == posixpath.normpath(jars_dest)
    # and the Delta version fetched is the one pyproject pins and session.py looks for
    from auditor.spark import session

    assert version == session.DELTA_VERSION
    assert f"delta-spark=={version}" in PYPROJECT["project"]["dependencies"]


def test_session_reads_txn_audit_delta_jars(monkeypatch, tmp_path):
    src = (PROJECT / "auditor/spark/session.py").read_text()
    tree = ast.parse(src)
    consts = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name) and isinstance(n.value, ast.Constant)}
    reads = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) in
             ("os.environ.get", "os.getenv") and n.args
             and (getattr(n.args[0], "value", None) == "TXN_AUDIT_DELTA_JARS"
                  or consts.get(getattr(n.args[0], "id", None)) == "TXN_AUDIT_DELTA_JARS")]
    assert reads, "auditor/spark/session.py does not read TXN_AUDIT_DELTA_JARS"
    # behaviour: the jars fetch.sh guarantees, in the directory the variable names, are picked up
    from auditor.spark import session

    fetch = _fetch_script()
    assert len(fetch["jars"]) == 2
    for j in fetch["jars"]:
        (tmp_path / j.replace('"$VERSION"', fetch["version"]).replace("$VERSION", fetch["version"])).touch()
    monkeypatch.setenv("TXN_AUDIT_DELTA_JARS", str(tmp_path))
    assert session.delta_jars_dir() == tmp_path
    assert sorted(Path(j).parent for j in session.delta_jars()) == [tmp_path, tmp_path]


def test_dockerfile_python_and_java_fit_the_project():
    def python_version(st: Stage) -> str:
        m = re.fullmatch(r"(?:docker\.io/)?(?:library/)?python:(\d+\.\d+(?:\.\d+)?)(?:-\S+)?", st.image)
        assert m, f"FROM {st.image}: not an official python image with a version"
        return m.group(1)

    runtime = python_version(RUNTIME)
    assert Version(runtime) in SpecifierSet(PYPROJECT["project"]["requires-python"])
    # wheels are built by the interpreter that installs them (compiled dependencies are per minor version)
    assert Version(python_version(STAGE["wheels"])).release[:2] == Version(runtime).release[:2]
    # PySpark 4 needs Java 17 or later
    jdks = [int(m) for a, _ in RUNTIME.all("RUN") for m in re.findall(r"openjdk-(\d+)-jre", a)]
    assert jdks and min(jdks) >= 17
