"""The catalogue of hostile inputs, run through the real command line.

One hostile tree per module (``hostile_tree.build_hostile``): two good log dirs copied from
``sample_logs/`` (two clusters, both with findings) with hostile partitions next to their good
ones, a log dir of a third cluster holding corrupt cluster-wide files, a log dir with a corrupt
``meta.properties`` and one whose ``meta.properties`` is a FIFO. Spark runs once per module, in
one subprocess (``cli_session.py``: several command lines, one JVM) inside a private mount
namespace where it can be done (root, or an unprivileged user namespace):

1. ``scan`` of a fresh copy of the good log dirs alone, on a **read-only mount**;
2. ``scan`` of the hostile tree (and a path that does not exist);
3. ``scan`` and ``ingest`` into a directory on a read-only mount (**output not writable**);
4. ``scan`` into a small tmpfs that holds a previous set of tables (**output fills up**).

Checked: per kind, the ``files`` table row and the stderr line (status, path, byte position);
for the whole run, the exit statuses and no traceback, a hang guard, the peak RSS of every
process of the run (driver, JVM, Python workers), the good partitions' findings equal to the scan
of the good partitions alone, and every input tree byte-identical afterwards. Files that change
size while they are read are decoded directly (``decode_task``, what executors run), where the
moment of the change can be chosen. ``dump`` of the whole tree runs once too (no Spark).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import hostile_tree as ht
from builders import data_batch
from conftest import PROJECT

RUN_TIMEOUT = 900  # hang guard for the whole Spark session (a run takes about a minute)
GIB = 1 << 30


# -- the input trees' state: every entry's type, mode, size, mtime and content ---------------------

def _digest(path: Path) -> str:
    """Content hash of a regular file, reading only its data extents (a 2 GiB sparse file has one)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        end = os.fstat(fd).st_size
        pos = 0
        while pos < end:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
                stop = os.lseek(fd, start, os.SEEK_HOLE)
            except OSError:  # no data after pos (or no SEEK_DATA here: read it all)
                break
            h.update(b"@%d:" % start)
            os.lseek(fd, start, os.SEEK_SET)
            while start < stop:
                chunk = os.read(fd, min(1 << 20, stop - start))
                if not chunk:
                    break
                h.update(chunk)
                start += len(chunk)
            pos = stop
    finally:
        os.close(fd)
    return h.hexdigest()


def tree_state(root: Path) -> dict[str, tuple]:
    """path -> (mode, size, mtime_ns, content): links by their target, FIFOs and devices by
    their metadata only (never opened), directories by mode and mtime (an entry added or
    removed changes it)."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            p = Path(dirpath) / name
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                content = "-> " + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                content = _digest(p)
            else:
                content = st.st_rdev
            state[str(p.relative_to(root))] = (st.st_mode, st.st_size if not stat.S_ISDIR(st.st_mode) else 0,
                                               st.st_mtime_ns, content)
    return state


# -- where the run can mount: a private mount namespace ---------------------------------------------

def _namespace() -> list[str] | None:
    """The prefix that runs a command in a private mount namespace (its mounts are its own and go
    with it), if this machine allows one: root, or an unprivileged user namespace."""
    if not shutil.which("unshare"):
        return None
    prefix = ["unshare", "-m", "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.insert(1, "-r")
    probe = subprocess.run([*prefix, "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /tmp"],
                           capture_output=True, timeout=30)
    return prefix if probe.returncode == 0 else None




# -- a process tree's memory, sampled -------------------------------------------------------------

class RssSampler(threading.Thread):
    """Samples the peak resident set size (``VmHWM``: the high-water mark of the process's own
    memory since its exec, so nothing is missed between samples) of a process and all its
    descendants every 0.2 s. Not ``wait4``'s ``ru_maxrss``: Linux carries the forking parent's
    size over the exec into it, so a child of a large pytest process would look as large."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.samples: list[tuple[float, int, str, int]] = []  # (monotonic time, pid, comm, rss bytes)
        self.done = threading.Event()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(d))
        out, todo = [], [self.pid]
        while todo:
            p = todo.pop()
            out.append(p)
            todo += children.get(p, [])
        return out

    def run(self) -> None:
        while not self.done.wait(0.2):
            now = time.monotonic()
            for p in self._tree():
                try:
                    with open(f"/proc/{p}/status") as f:
                        status = dict(line.split(":", 1) for line in f if ":" in line)
                except OSError:
                    continue
                rss = int(status.get("VmHWM", status.get("VmRSS", "0 kB")).split()[0]) * 1024
                self.samples.append((now, p, status["Name"].strip(), rss))

    def peaks(self, t0: float, t1: float) -> dict[str, int]:
        """Peak RSS between t0 and t1 per role: driver (the session's own process), jvm, worker (any
        other Python process: Spark's Python workers), other."""
        out: dict[str, int] = {}
        for t, p, comm, rss in self.samples:
            if t0 <= t <= t1:
                role = ("driver" if p == self.pid else "jvm" if comm == "java"
                        else "worker" if comm.startswith("python") else "other")
                out[role] = max(out.get(role, 0), rss)
        return out


# -- the module's run -------------------------------------------------------------------------------

@dataclass
class Catalogue:
    base: Path
    hostile: Path
    good: Path
    expect: dict[str, list[ht.Expect]]
    clusters: dict[str, str]
    before: dict[str, dict]
    steps: dict[str, dict]
    sampler: RssSampler
    seconds: float
    read_only: str  # "mount", "chmod" or "" (not possible here)
    files: dict[str, dict] | None = None

    def step(self, name: str) -> dict:
        assert name in self.steps, f"step {name} did not run: {sorted(self.steps)}"
        return self.steps[name]


@pytest.fixture(scope="module")
def trees(tmp_path_factory):
    base = tmp_path_factory.mktemp("catalogue")
    hostile, good = base / "hostile", base / "good"
    hostile.mkdir()
    good.mkdir()
    clusters = ht.build_good(hostile)
    expect = ht.build_hostile(hostile)
    ht.build_good(good)
    before = {"hostile": tree_state(hostile), "good": tree_state(good)}
    return base, hostile, good, expect, clusters, before


BIG_BATCHES = 110_000  # over DRIVER_TABLE_ROWS (100,000)


def _big_input(root: Path) -> None:
    """A log dir of one partition whose segment is over SMALL_INPUT_BYTES (64 MiB): BIG_BATCHES
    idempotent batches of ~620 bytes (one built, the rest copies with their base offset and
    base sequence rewritten and their CRC-32C recomputed)."""
    import struct

    import crc32c

    one = bytearray(data_batch(0, 1, producer_id=5, producer_epoch=0, base_sequence=0, value=b"v" * 540))
    seg = root / "broker-1" / "big-0" / ht.SEG0
    seg.parent.mkdir(parents=True)
    with open(seg, "wb", buffering=1 << 22) as f:
        for i in range(BIG_BATCHES):
            struct.pack_into(">q", one, 0, i)
            struct.pack_into(">i", one, 53, i)  # base sequence
            struct.pack_into(">I", one, 17, crc32c.crc32c(bytes(one[21:])))
            f.write(one)
    assert seg.stat().st_size > 64 * 1024 * 1024


def _steps(base: Path, hostile: Path, good: Path, read_only: str) -> list[dict]:
    t_good, t_hostile, nowrite, full = base / "tables-good", base / "tables-hostile", base / "nowrite", base / "full"
    big, full_big = base / "big", base / "full-big"
    nowrite.mkdir()
    full.mkdir()
    full_big.mkdir()
    steps: list[dict] = []
    if read_only == "mount":
        steps.append({"name": "read-only", "sh": " && ".join(
            f"mount --bind {d} {d} && mount -o remount,bind,ro {d}" for d in (good, nowrite))})
    elif read_only == "chmod":
        steps.append({"name": "read-only", "sh": f"chmod -R a-w {good} {nowrite}"})
    steps += [
        {"name": "good", "argv": ["scan", str(good), "--tables", str(t_good), "--out", str(base / "findings-good"),
                                  "--format", "json"]},
        {"name": "hostile", "argv": ["scan", str(hostile), str(hostile / "no-such-dir"), "--tables", str(t_hostile),
                                     "--out", str(base / "findings-hostile"), "--format", "json"]},
    ]
    if read_only:
        steps += [
            {"name": "nowrite-scan", "argv": ["scan", str(good), "--tables", str(nowrite / "tables"),
                                              "--out", str(nowrite / "findings"), "--format", "json"]},
            {"name": "nowrite-ingest", "argv": ["ingest", str(good), "--out", str(nowrite / "tables")]},
        ]
    if read_only == "mount":
        # a tmpfs that holds the good scan's tables and 32 KiB more: the next set cannot fit beside them
        steps += [
            {"name": "fill", "sh": f"mount -t tmpfs -o size=$(( $(du -sk {t_good} | cut -f1) + 32 ))k tmpfs {full}"
                                   f" && cp -a {t_good} {full}/tables"},
            {"name": "full", "argv": ["scan", str(good), "--tables", str(full / "tables"), "--format", "json"]},
            {"name": "full-state", "sh": f"cd {full} && echo $(ls -A) && find tables -type f | sort | xargs sha256sum"},
            # an input over ingest_job.SMALL_INPUT_BYTES whose batches table has more than DRIVER_TABLE_ROWS
            # rows, decoded by Spark (the local decode switched off): that table is written by Spark's
            # tasks, whose failure comes back as a Java error
            {"name": "fill-big", "sh": f"mount -t tmpfs -o size=1m tmpfs {full_big}"},
            {"name": "full-big", "argv": ["scan", str(big), "--tables", str(full_big / "tables"), "--format", "json"],
             "env": {"TXN_AUDIT_DISABLE": "local_decode"}},
            {"name": "full-big-state", "sh": f"cd {full_big} && echo $(ls -A)"},
            # the same input decoded as a local master decodes it: the parts written by local processes
            {"name": "full-big-local", "argv": ["scan", str(big), "--tables", str(full_big / "tables"),
                                                "--format", "json"]},
            {"name": "full-big-local-state", "sh": f"cd {full_big} && echo $(ls -A)"},
        ]
    return steps


@pytest.fixture(scope="module")
def catalogue(trees) -> Catalogue:
    base, hostile, good, expect, clusters, before = trees
    namespace = _namespace()
    # without a namespace, read-only inputs and outputs are made with chmod, which binds only non-root users
    read_only = "mount" if namespace else ("chmod" if os.geteuid() != 0 else "")
    if read_only == "mount":
        _big_input(base / "big")
    steps = _steps(base, hostile, good, read_only)
    (base / "steps.json").write_text(json.dumps(steps))
    cwd, tmp = base / "cwd", base / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PROJECT), str(PROJECT / "tests")]), "TMPDIR": str(tmp),
           "COLUMNS": "200"}
    cmd = [*(namespace or []), sys.executable, str(PROJECT / "tests" / "cli_session.py"),
           str(base / "steps.json"), str(base / "results.json")]
    t0 = time.monotonic()
    with open(base / "session.err", "wb") as err:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
        sampler = RssSampler(proc.pid)
        sampler.start()
        try:
            proc.wait(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        finally:
            sampler.done.set()
            sampler.join()
    seconds = time.monotonic() - t0
    results = json.loads((base / "results.json").read_text()) if (base / "results.json").exists() else []
    if read_only == "chmod":
        subprocess.run(["chmod", "-R", "u+w", str(good), str(base / "nowrite")], check=True)
    assert proc.returncode == 0 and len(results) == len(steps), (
        f"the session ended with {proc.returncode} after {seconds:.0f} s (hang guard {RUN_TIMEOUT} s) in step "
        f"{steps[len(results)]['name'] if len(results) < len(steps) else '-'}:\n"
        + (base / "session.err").read_text()[-3000:])
    cat = Catalogue(base, hostile, good, expect, clusters, before, {r["name"]: r for r in results}, sampler, seconds,
                    read_only)
    summary = {r["name"]: {"code": r["code"], "seconds": round(r["t1"] - r["t0"], 1),
                           "peak_rss_mib": {k: v >> 20 for k, v in sampler.peaks(r["t0"], r["t1"]).items()}}
               for r in results}
    (base / "summary.json").write_text(json.dumps(summary, indent=1))
    print(f"\nhostile catalogue: session {seconds:.0f} s; {json.dumps(summary)}")
    return cat


@pytest.fixture(scope="module")
def files(catalogue) -> dict[str, dict]:
    """The hostile scan's ``files`` table, by path relative to the tree root."""
    import pyarrow.parquet as pq

    rows = pq.read_table(catalogue.base / "tables-hostile" / "files").to_pylist()
    return {os.path.relpath(r["path"], catalogue.hostile): r for r in rows}


def _clean(step: dict) -> None:
    assert step["traceback"] is None and "Traceback" not in step["stderr"], step["stderr"][-3000:]


# -- per kind ---------------------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.parametrize("kind", ht.KINDS)
def test_kind_is_reported_with_path_and_position(catalogue, files, kind):
    err = catalogue.step("hostile")["stderr"]
    for e in catalogue.expect[kind]:
        assert e.path in files, f"no row for {e.path}"
        row = files[e.path]
        said = (row["error_message"] or "") + " " + (row["note"] or "")
        assert (row["status"], row["error_position"]) == (e.status, e.position), (e, row)
        assert e.text in said, (e, said)
        if e.rows is not None:
            assert row["rows"] == e.rows, (e, row)
        if row["status"] not in ("ok", "empty", "skipped"):
            where = f"byte {e.position}" if e.position is not None else "whole file"
            assert f"{e.status} {catalogue.hostile / e.path} at {where}: " in err, (e, err[-3000:])


@pytest.mark.spark
def test_empty_segments_are_each_listed_once(files):
    rows = [r for p, r in files.items() if p.startswith("broker-1/h-empty-0/")]
    assert len(rows) == ht.EMPTY_SEGMENTS and {r["status"] for r in rows} == {"empty"}


# -- the whole run ----------------------------------------------------------------------------------

@pytest.mark.spark
def test_exit_status_and_no_traceback(catalogue):
    for name in ("good", "hostile"):
        step = catalogue.step(name)
        _clean(step)
        # scan's status is about findings: 1 = a finding at or above --fail-on (both good scenarios hang)
        assert step["code"] == 1, (name, step["stderr"][-3000:])
        report = json.loads(step["stdout"])
        assert report["findings"] and report["summary"]
        assert "no run summary" not in step["stderr"]


@pytest.mark.spark
def test_bounded_memory(catalogue):
    """Peak RSS of every process while the hostile tree is scanned (2 GiB sparse segment, 64 MiB
    compression bombs, 20,000 files): a claimed 2 GiB read would show in a Python process."""
    step = catalogue.step("hostile")
    peaks = catalogue.sampler.peaks(step["t0"], step["t1"])
    assert peaks.get("driver", 0) < GIB and peaks.get("worker", 0) < GIB, peaks
    assert peaks.get("jvm", 0) < 3 * GIB, peaks  # -Xmx2g plus the JVM's own


@pytest.mark.spark
def test_good_findings_equal_a_scan_of_the_good_partitions_alone(catalogue):
    """The hostile scan's findings on the good clusters' good partitions equal the good scan's.

    What may differ: the paths (``log_dir``, and any text quoting one) name the other tree; they
    are compared relative to it. Findings on hostile partitions (topics ``h-*``) and on the other
    clusters are left out: those partitions exist in one tree only."""
    def mine(step: str, root: Path) -> list[str]:
        out = []
        for f in json.loads(catalogue.step(step)["stdout"])["findings"]:
            if f["cluster_id"] in catalogue.clusters.values() and not (f.get("topic") or "").startswith("h-"):
                out.append(json.dumps(f, sort_keys=True).replace(str(root), "<root>"))
        return sorted(out)

    good = mine("good", catalogue.good)
    assert good and mine("hostile", catalogue.hostile) == good


def test_dump_of_the_hostile_tree(trees):
    """``dump`` (no Spark) over the whole tree: finishes, stays small, names every bad file."""
    base, hostile, _good, expect, _clusters, _before = trees
    with open(base / "dump.out", "wb") as out, open(base / "dump.err", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "auditor.cli.main", "dump", str(hostile)], stdout=out,
                                stderr=err, cwd=PROJECT, env={**os.environ, "COLUMNS": "200"})
        timer = threading.Timer(300, proc.kill)  # hang guard
        timer.start()
        sampler = RssSampler(proc.pid)
        sampler.start()
        _pid, status, _usage = os.wait4(proc.pid, 0)
        sampler.done.set()
        timer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    text = (base / "dump.err").read_text()
    assert proc.returncode == 1 and "Traceback" not in text, text[-3000:]
    peak = max(rss for _t, pid, _comm, rss in sampler.samples if pid == proc.pid)
    assert 0 < peak < GIB / 2, peak
    for kind in ("truncated", "bad-crc", "absurd-length", "sparse-2gib", "fifo", "dev-zero", "segment-is-directory"):
        for e in expect[kind]:
            assert e.status == "ok" or str(hostile / e.path) in text, (kind, e)


@pytest.mark.spark
def test_input_trees_are_byte_identical_afterwards(catalogue):
    assert tree_state(catalogue.hostile) == catalogue.before["hostile"]
    assert tree_state(catalogue.good) == catalogue.before["good"]


@pytest.mark.spark
def test_nothing_written_outside_the_outputs(catalogue):
    """The session's working directory and TMPDIR are as empty afterwards as before."""
    assert sorted(os.listdir(catalogue.base / "cwd")) == []
    assert sorted(os.listdir(catalogue.base / "tmp")) == []


# -- read-only input, unwritable and full outputs ----------------------------------------------------

def _needs(catalogue, what: str) -> None:
    if what == "mount" and catalogue.read_only != "mount":
        pytest.skip("needs a private mount namespace (root, or unprivileged user namespaces) for a tmpfs")
    if not catalogue.read_only:
        pytest.skip("root without a mount namespace: chmod does not stop root from writing")


@pytest.mark.spark
def test_scan_of_a_read_only_input(catalogue):
    _needs(catalogue, "read-only")
    step = catalogue.step("good")  # the good tree was mounted read-only (or chmod a-w) for the whole session
    _clean(step)
    assert step["code"] == 1 and json.loads(step["stdout"])["findings"]
    assert (catalogue.base / "tables-good" / "_ingest.json").is_file()


@pytest.mark.spark
@pytest.mark.parametrize("command", ["scan", "ingest"])
def test_output_dir_not_writable(catalogue, command):
    _needs(catalogue, "read-only")
    step = catalogue.step(f"nowrite-{command}")
    _clean(step)
    assert step["code"] == 2, step
    target = catalogue.base / "nowrite" / "tables"
    assert step["stderr"].strip().splitlines()[-1].startswith(f"Error: cannot write {target}: "), step["stderr"]
    assert os.listdir(catalogue.base / "nowrite") == []


@pytest.mark.spark
def test_output_dir_fills_up(catalogue):
    """The tables go to a tmpfs that the previous tables nearly fill: a clear error naming the
    directory, status 2, and the previous tables untouched (no half-written set, no staging left)."""
    _needs(catalogue, "mount")
    step = catalogue.step("full")
    _clean(step)
    assert step["code"] == 2, step["stderr"][-3000:]
    line = step["stderr"].strip().splitlines()[-1]
    assert line.startswith(f"Error: cannot write {catalogue.base / 'full' / 'tables'}: ") and "No space left" in line, line
    listing, *sums = catalogue.step("full-state")["stdout"].splitlines()
    assert listing == "tables", listing  # no .tables.tmp-* / .tables.old-* beside it
    good = catalogue.base / "tables-good"
    expected = sorted(f"{hashlib.sha256(p.read_bytes()).hexdigest()}  tables/{p.relative_to(good)}"
                      for p in good.rglob("*") if p.is_file())
    assert sorted(sums) == expected


@pytest.mark.spark
def test_output_fills_up_while_spark_writes_a_large_table(catalogue):
    """The same on the path where Spark's tasks write a table (an input over 64 MiB, a batches table
    over 100,000 rows): the JVM's "No space left on device" becomes the same one line, status 2,
    and nothing is left in the directory (no staging, no half-written tables)."""
    _needs(catalogue, "mount")
    step = catalogue.step("full-big")
    _clean(step)
    assert step["code"] == 2, step["stderr"][-3000:]
    line = step["stderr"].strip().splitlines()[-1]
    assert line.startswith(f"Error: cannot write {catalogue.base / 'full-big' / 'tables'}: No space left"), line
    assert "Spark writing a table" in line and "Py4J" not in step["stderr"] and "java." not in step["stderr"], line
    assert catalogue.step("full-big-state")["stdout"].strip() == ""


@pytest.mark.spark
def test_output_fills_up_while_the_local_decode_writes_its_parts(catalogue):
    """The same input decoded by local processes, each writing its tables' parts into the staging
    directory: the worker's "No space left on device" is the same one line, status 2, and the
    directory is left empty (the staging with its parts removed)."""
    _needs(catalogue, "mount")
    step = catalogue.step("full-big-local")
    _clean(step)
    assert step["code"] == 2, step["stderr"][-3000:]
    line = step["stderr"].strip().splitlines()[-1]
    assert line.startswith(f"Error: cannot write {catalogue.base / 'full-big' / 'tables'}: No space left"), line
    assert "Traceback" not in step["stderr"], step["stderr"][-3000:]
    assert catalogue.step("full-big-local-state")["stdout"].strip() == ""


# -- files that change size while they are read (the decode executors run, at a chosen moment) -------

def _segment_tasks(tmp_path: Path) -> tuple[list[bytes], dict[str, dict]]:
    """Three batches as an active segment (plain reads) and as an older one (memory-mapped)."""
    from auditor.ingest.plan import make_plan

    batches = [data_batch(2 * i, 2) for i in range(3)]
    for p in ("t-0", "t-1"):
        ht.write(tmp_path / "b" / p / ht.SEG0, b"".join(batches))
    ht.write(tmp_path / "b" / "t-1" / "00000000000000001000.log", b"")
    tasks = {("active" if t["active"] else "mapped"): t for t in make_plan([str(tmp_path / "b")]).tasks
             if t["path"].endswith(ht.SEG0)}
    assert set(tasks) == {"active", "mapped"}
    return batches, tasks


def _decode(task: dict) -> tuple[list[int], list[tuple]]:
    from auditor.ingest.tables import TABLES, iter_rows

    rows = list(iter_rows(TABLES["batches"], task))
    return ([r["base_offset"] for r in rows if not r.get("_problem_kind")],
            [(r["_problem_kind"], r["_problem_position"]) for r in rows if r.get("_problem_kind")])


@pytest.mark.parametrize("path", ["active", "mapped"])
@pytest.mark.parametrize("cut", ["in-header", "in-payload", "at-boundary"])
def test_segment_shrinks_between_discovery_and_decode(tmp_path, path, cut):
    batches, tasks = _segment_tasks(tmp_path)
    p3 = len(batches[0]) + len(batches[1])
    keep = {"in-header": p3 + 20, "in-payload": p3 + 70, "at-boundary": p3}[cut]
    os.truncate(tasks[path]["path"], keep)
    offsets, problems = _decode(tasks[path])
    assert offsets == [0, 2]  # what is still there, and nothing of the cut batch
    assert problems == ([] if cut == "at-boundary" else [("truncated", p3)])


@pytest.mark.parametrize("path", ["active", "mapped"])
def test_segment_grows_between_discovery_and_decode(tmp_path, path):
    batches, tasks = _segment_tasks(tmp_path)
    with open(tasks[path]["path"], "ab") as f:
        f.write(data_batch(6, 2))
    assert _decode(tasks[path]) == ([0, 2, 4], [])  # the file as it was sized, consistently


@pytest.mark.parametrize("path", ["active", "mapped"])
def test_segment_replaced_between_discovery_and_decode(tmp_path, path):
    """The cleaner of a running broker swaps a cleaned segment in under the old name: the file at the
    path is not the one listed, and it is not read (the partition would be read as of two times)."""
    batches, tasks = _segment_tasks(tmp_path)
    seg = Path(tasks[path]["path"])
    swap = seg.with_name(seg.name + ".swap")
    swap.write_bytes(b"".join(batches))  # the same bytes, even: another file
    os.replace(swap, seg)
    assert _decode(tasks[path]) == ([], [("unreadable", 0)])
    from auditor.ingest.tables import TABLES, iter_rows

    (row,) = list(iter_rows(TABLES["batches"], tasks[path]))
    assert "changed since it was listed" in row["_problem_message"]


def test_a_file_gone_after_its_directory_was_listed_is_not_called_a_broken_link(tmp_path):
    """A running broker's temporary file (``cleaner-offset-checkpoint.tmp``) can vanish between the
    listing of its directory and the look at it: that is what the row says, not a broken link."""
    from auditor.ingest.discovery import _not_a_file

    gone = _not_a_file(tmp_path / "cleaner-offset-checkpoint.tmp", str(tmp_path), str(tmp_path), None, None, "root")
    assert gone.note.startswith("vanished after its directory was listed") and "No such file" in gone.note
    (tmp_path / "link.log").symlink_to(tmp_path / "nowhere")
    broken = _not_a_file(tmp_path / "link.log", str(tmp_path), str(tmp_path), None, None, "root")
    assert broken.note.startswith("broken symbolic link")


def test_a_segment_not_read_between_others_is_a_gap_in_the_partition():
    """What the verdicts read of a segment left unread between two read ones (auditor.model.coverage):
    a segment between the given ones, and the offsets it spans."""
    from auditor.model import coverage

    def seg(base: int, status: str) -> dict:
        return {"kind": "segment", "file_status": "live", "topic": "kv", "partition": 0, "log_dir": "/d",
                "cluster_id": "c", "broker_id": 1, "base_offset": base, "status": status}

    cov = coverage.build([seg(0, "ok"), seg(10, "unreadable"), seg(20, "ok")], [], None)
    (r,) = [r for r in cov.replicas if r[3:5] == ("kv", 0)]
    assert (r[6], r[7], r[8], r[10], r[11]) == (0, 0, 1, 10, 20)


_TRUNCATE_WHILE_MAPPED = textwrap.dedent("""
    import json, os, sys
    from auditor.ingest.tables import TABLES, decode_task
    task, cut = json.loads(sys.argv[1]), int(sys.argv[2])
    it = decode_task(TABLES["batches"], task)
    rows = next(it).num_rows  # the first chunk (16 MiB of the mapping) is decoded
    os.truncate(task["path"], cut)  # a broker truncating the segment meanwhile
    problems = []
    for item in it:
        if isinstance(item, dict):
            problems.append([item["_problem_kind"], item["_problem_position"]])
        else:
            rows += item.num_rows
    print(json.dumps({"rows": rows, "problems": problems}))
""")


def test_segment_truncated_while_memory_mapped(tmp_path):
    """An older segment is decoded through a memory mapping; a file truncated under a mapping
    kills the reader with SIGBUS when it touches the lost pages. Truncated between two chunks,
    the decode stops where the file now ends."""
    from auditor.ingest.plan import make_plan

    batches = [data_batch(i, 1, value=bytes(1 << 20)) for i in range(40)]  # 40 MiB: three chunks
    ht.write(tmp_path / "b" / "t-0" / ht.SEG0, b"".join(batches))
    ht.write(tmp_path / "b" / "t-0" / "00000000000000001000.log", b"")
    task = next(t for t in make_plan([str(tmp_path / "b")]).tasks if t["path"].endswith(ht.SEG0))
    assert not task["active"]
    cut = 20 << 20
    res = subprocess.run([sys.executable, "-c", _TRUNCATE_WHILE_MAPPED, json.dumps(task), str(cut)],
                         capture_output=True, timeout=120, cwd=PROJECT)
    assert res.returncode == 0, (res.returncode, res.stderr.decode()[-2000:])  # -7: SIGBUS
    whole = cut // len(batches[0])
    assert json.loads(res.stdout) == {"rows": whole, "problems": [["truncated", whole * len(batches[0])]]}


_SHRINKING_WHILE_READ = textwrap.dedent("""
    import json, os, sys, threading, time
    from auditor.ingest.tables import TABLES, decode_task
    task = json.loads(sys.argv[1])
    size = task["size"]
    started = threading.Event()

    def shrink():  # a broker truncating the segment in steps while it is read
        started.wait()
        for cut in range(size - 100, 0, -(256 << 10)):
            os.truncate(task["path"], cut)
            time.sleep(0.0002)

    t = threading.Thread(target=shrink)
    t.start()
    rows, problems = 0, []
    for item in decode_task(TABLES["batches"], task):
        started.set()
        if isinstance(item, dict):
            problems.append(item["_problem_kind"])
        else:
            rows += item.num_rows
    started.set()
    t.join()
    print(json.dumps({"rows": rows, "problems": problems}))
""")


@pytest.mark.parametrize("run", range(3))
def test_segment_shrinking_while_read_never_kills_the_reader(tmp_path, run):
    """Any segment of a running broker can shrink under the reader, inside what is being decoded
    (a follower truncating to its leader's epoch end, recovery after an unclean restart). Segments
    are read with positioned reads into the process's own buffers, never memory-mapped, so a
    truncation at any moment gives a shorter decode or a ``truncated`` problem, never SIGBUS."""
    from auditor.ingest.plan import make_plan

    one = data_batch(0, 1, value=bytes(4000))
    batches = [one] * 12_000  # 48 MiB of small batches: a chunk's decode takes long enough to be cut into
    ht.write(tmp_path / "b" / "t-0" / ht.SEG0, b"".join(batches))
    ht.write(tmp_path / "b" / "t-0" / "00000000000000001000.log", b"")
    task = next(t for t in make_plan([str(tmp_path / "b")]).tasks if t["path"].endswith(ht.SEG0))
    assert not task["active"]
    res = subprocess.run([sys.executable, "-c", _SHRINKING_WHILE_READ, json.dumps(task)],
                         capture_output=True, timeout=120, cwd=PROJECT)
    assert res.returncode == 0, (res.returncode, res.stderr.decode()[-2000:])  # -7: SIGBUS
    out = json.loads(res.stdout)
    assert 0 <= out["rows"] < len(batches) and set(out["problems"]) <= {"truncated"}, out


_REPLACED_BY_FIFO = textwrap.dedent("""
    import json, sys
    from auditor.ingest.tables import TABLES, iter_rows
    task = json.loads(sys.argv[1])
    print(json.dumps([[r.get("_problem_kind"), r.get("_problem_message")] for r in iter_rows(TABLES["batches"], task)]))
""")


def test_segment_replaced_by_a_fifo_after_discovery(tmp_path):
    """Opening a FIFO to read waits for a writer: a segment replaced by one between discovery and
    decode must be refused when opened, not block the executor."""
    _batches, tasks = _segment_tasks(tmp_path)
    task = tasks["active"]
    os.unlink(task["path"])
    os.mkfifo(task["path"])
    res = subprocess.run([sys.executable, "-c", _REPLACED_BY_FIFO, json.dumps(task)], capture_output=True,
                         timeout=60, cwd=PROJECT)
    assert res.returncode == 0, res.stderr.decode()[-2000:]
    assert json.loads(res.stdout) == [["unreadable", "cannot open: a FIFO (named pipe), not a regular file"]]
