"""A real, single-host HDFS for tests and benchmarks: one NameNode and one DataNode of Apache
Hadoop in one JVM (``MiniHdfs.java`` beside this file, run by the JDK's source launcher from the
jars ``fetch.sh`` resolves from Maven Central into ``build/hdfs/jars``), on 127.0.0.1 with free
ports, formatted empty on every start.

Standard library only, so tests and scripts import it without the project::

    from scripts.hdfs.harness import MiniHdfs
    with MiniHdfs(workdir) as hdfs:      # start() on enter (about 5 s), stop() on exit
        hdfs.url                         # "hdfs://127.0.0.1:<port>"

The JVM never outlives the Python process: it exits when its stdin closes (``stop()``, or this
process dying), and an ``atexit`` hook kills whatever is still running.

:func:`mirror` makes a directory of the HDFS hold what a local directory holds (with the
``hdfs-native`` client the project depends on): new files are written, a file that grew by
appending is appended to (an HDFS append: same file, new length and modification time), a
changed one is rewritten, a vanished one deleted.
"""

from __future__ import annotations

import atexit
import os
import select
import subprocess
import time
import weakref
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
JARS = ROOT / "build" / "hdfs" / "jars"
_LIVE: "weakref.WeakSet[MiniHdfs]" = weakref.WeakSet()


class HdfsError(RuntimeError):
    """The HDFS could not be started (the message carries the tail of its log)."""


def jars_dir(fetch: bool = True) -> Path:
    """``build/hdfs/jars``; resolved with fetch.sh (Maven) when missing and ``fetch``."""
    if (JARS / ".complete").exists():
        return JARS
    if not fetch:
        raise HdfsError("HDFS jars missing: run scripts/hdfs/fetch.sh (make setup does)")
    r = subprocess.run(["bash", str(HERE / "fetch.sh")], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise HdfsError(f"scripts/hdfs/fetch.sh failed:\n{r.stderr[-3000:]}")
    return JARS


class MiniHdfs:
    def __init__(self, workdir: str | os.PathLike, *, heap_mb: int = 512, start_timeout: float = 120) -> None:
        self.workdir = Path(workdir)
        self.heap_mb = heap_mb
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.http_port: int | None = None
        self.log_file = self.workdir / "hdfs.log"

    def command(self) -> list[str]:
        # the daemons' web servers look their (here empty) web apps up on the classpath
        res = self.workdir / "classpath"
        for app in ("hdfs", "datanode"):
            (res / "webapps" / app).mkdir(parents=True, exist_ok=True)
        return ["java", f"-Xmx{self.heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", "-cp", f"{jars_dir()}/*{os.pathsep}{res}",
                str(HERE / "MiniHdfs.java"), str(self.workdir / "dfs")]

    def start(self) -> "MiniHdfs":
        self.workdir.mkdir(parents=True, exist_ok=True)
        cmd = self.command()
        log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                                     cwd=self.workdir)
        log.close()
        _LIVE.add(self)
        deadline = time.monotonic() + self.start_timeout
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            ready = select.select([self.proc.stdout], [], [], max(0.0, left))[0] if left > 0 else []
            if not ready:
                self.kill()
                raise HdfsError(f"HDFS did not start in {self.start_timeout:.0f} s:\n{self.log_tail()}")
            chunk = os.read(self.proc.stdout.fileno(), 4096)  # type: ignore[union-attr]
            if not chunk:
                code = self.proc.wait()
                raise HdfsError(f"HDFS exited ({code}) before it was ready (needs a JDK: the source launcher "
                                f"compiles MiniHdfs.java):\n{self.log_tail()}")
            line += chunk
        words = line.decode().split()
        if len(words) != 3 or words[0] != "READY":
            self.kill()
            raise HdfsError(f"unexpected output {line!r}:\n{self.log_tail()}")
        self.url, self.http_port = words[1], int(words[2])
        return self

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_file.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> None:
        """Close stdin: the DataNode and the NameNode shut down and the JVM exits."""
        if self.proc is None:
            return
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        finally:
            if self.proc.stdout:
                self.proc.stdout.close()
            self.proc = None

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> "MiniHdfs":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def mirror(client, local: str | os.PathLike, remote: str, *, keep_mtime: set[str] = frozenset(),
           threads: int = 64) -> dict[str, str]:
    """Make HDFS directory ``remote`` hold what local directory ``local`` holds; returns
    {relative path: "new" | "appended" | "rewritten" | "deleted"} for what changed.
    ``keep_mtime``: relative paths whose rewrite keeps the previous modification time
    (a file whose change only its content tells)."""
    from concurrent.futures import ThreadPoolExecutor

    from hdfs_native import WriteOptions

    local = Path(local)
    have = {}
    try:
        for st in client.list_status(remote, True):
            if not st.isdir:
                have[os.path.relpath(st.path, remote)] = st
    except FileNotFoundError:
        pass
    want = {str(p.relative_to(local)): p for p in local.rglob("*") if p.is_file()}
    dirs = {str(Path(remote, rel).parent) for rel in want}
    for d in sorted(dirs):
        client.mkdirs(d, 0o755, True)

    def sync(rel: str) -> tuple[str, str | None]:
        data = want[rel].read_bytes()
        path = f"{remote}/{rel}"
        old = have.get(rel)
        if old is None:
            with client.create(path, WriteOptions(overwrite=True)) as w:
                w.write(data)
            return rel, "new"
        current = client.read(path).read_range(0, old.length) if old.length else b""
        if current == data:
            return rel, None
        if old.length < len(data) and data[:old.length] == current:
            with client.append(path) as w:
                w.write(data[old.length:])
            return rel, "appended"
        with client.create(path, WriteOptions(overwrite=True)) as w:
            w.write(data)
        if rel in keep_mtime:
            client.set_times(path, old.modification_time, old.access_time)
        return rel, "rewritten"

    with ThreadPoolExecutor(threads) as pool:
        changes = {rel: what for rel, what in pool.map(sync, sorted(want)) if what}
    for rel in sorted(set(have) - set(want)):
        client.delete(f"{remote}/{rel}")
        changes[rel] = "deleted"
    return changes


@atexit.register
def _kill_all() -> None:
    for h in list(_LIVE):
        h.kill()
