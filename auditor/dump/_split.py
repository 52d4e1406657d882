"""``dump`` of many small files on two cores: the later files in a forked process.

Why: the shape an engineer dumps during an incident is a log dir -- hundreds of small segments,
indexes and internal-topic logs (the real captures: 1,486 files, 22 MB). One process takes
~1 s of CPU for their ``--records``; Kafka's tool, a JVM, spreads its work over both cores
(3.3 CPU-s in 1.8 s). Here the plan's files are cut in two parts by their estimated work; a
forked process dumps the second into a temporary file while this one dumps the first to
standard output, then its output is copied after the first part's, and its messages (problems,
skipped files) said after this one's. The bytes on standard output are the same as from one
process (``tests/test_dump_cli.py``); on stderr the second half's messages come once the first
half is written.

Only for ``txn-audit dump --records`` in its own process (``own_process``), JSON lines, at least
two CPUs, and an input of :data:`MIN_BYTES` to :data:`MAX_BYTES`: below, the fork saves nothing;
above, the second half's output would wait on disk in the temporary file. Batch headers alone
are the extension's work, ~0.15 ms a file: the same files' headers took 0.21-0.22 s in one
process or two. Switched off with
``TXN_AUDIT_DISABLE=dump_split`` (:mod:`auditor.perf`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from typing import Callable

from auditor.perf import enabled

# whole processes, --records, one process against two: 36 KB of files (24) 0.18-0.19 s either way;
# sample_logs/'s 289 segments (600 KB) 0.42 -> 0.31 s; the real captures (22 MB) 1.0 -> 0.67 s
MIN_BYTES = 256 << 10
MAX_BYTES = 64 << 20
_COPY = 1 << 20


# the files are cut by estimated work, not bytes: with --records an internal topic's byte costs
# ~10x a data topic's (its records become table rows in Python; a data topic's lines are the
# extension's), and each file ~20 KB's worth (opening, planning, a few calls). This process
# takes the first 40%: it copies the other half's output after its own. Measured on the real
# captures (1,486 files, whole processes): cut at half the bytes, the halves took 0.69 and
# 0.36 s; by these weights, first share 0.5: 0.72-0.73 s, 0.45: 0.74, 0.4: 0.66-0.68, 0.35: 0.68.
INTERNAL_WEIGHT = 10
FILE_WEIGHT = 20_000
FIRST_SHARE = 0.4


def split_at(files: list, by_path: dict, records: bool, internal: "tuple[str, ...]" = ()) -> "int | None":
    """The index of the first file the forked process dumps, or None (one process). ``internal``:
    the topics whose records become table rows (``auditor.dump._run._INTERNAL``)."""
    if not records or not enabled("dump_split") or (os.cpu_count() or 1) < 2 or len(files) < 2:
        return None
    tasks = [by_path.get(f.path) for f in files]
    if not MIN_BYTES <= sum(int(t["size"]) for t in tasks if t) <= MAX_BYTES:
        return None
    weights = [FILE_WEIGHT + (int(t["size"]) * (INTERNAL_WEIGHT if t.get("topic") in internal else 1)
                              if t else 0) for t in tasks]
    total, run = sum(weights), 0
    for i, n in enumerate(weights):
        run += n
        if run >= FIRST_SHARE * total:
            return i + 1 if i + 1 < len(files) else None
    return None


class Second:
    """The forked process dumping the second half: its output and messages, in files."""

    def __init__(self, pid: int, out, messages) -> None:
        self.pid, self.out, self.messages = pid, out, messages

    def finish(self, say: Callable) -> bool:
        """Wait for it, copy its output to standard output (after what is there), say its
        messages; True when it had a problem (or failed)."""
        _, status = os.waitpid(self.pid, 0)
        code = os.waitstatus_to_exitcode(status)
        try:
            sys.stdout.flush()
            _copy(self.out.fileno(), sys.stdout.fileno())
            self.messages.seek(0)
            for line in self.messages:
                what, *args = json.loads(line)
                say(what, *args)
        finally:
            self.out.close()
            self.messages.close()
        if code not in (0, 1):
            say("failed", f"the process dumping the second half of the files ended with status {code}")
            return True
        return code == 1

    def kill(self) -> None:
        """This process is failing (a closed pipe, an interrupt): the second half is not wanted."""
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        self.out.close()
        self.messages.close()


def fork(work: Callable[[Callable], bool]) -> "Second | None":
    """Run ``work(say)`` in a forked process whose standard output is a temporary file and whose
    ``say(what, *args)`` messages are kept for :meth:`Second.finish`; None when it cannot fork."""
    out = tempfile.TemporaryFile(prefix="txn-audit-dump-")
    messages = tempfile.TemporaryFile(prefix="txn-audit-dump-messages-")
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        out.close()
        messages.close()
        return None
    if pid:
        return Second(pid, out, messages)
    code = 2
    try:
        _die_with_parent()
        os.dup2(out.fileno(), sys.stdout.fileno())

        def say(what: str, *args) -> None:
            messages.write((json.dumps([what, *args]) + "\n").encode())

        try:
            code = 1 if work(say) else 0
        except BaseException as exc:  # said by the parent, which exits 1
            say("failed", f"dumping the second half of the files: {type(exc).__name__}: {exc}")
            code = 2
        sys.stdout.flush()
        messages.flush()
    finally:
        os._exit(code)


def _copy(src: int, dst: int) -> None:
    """All of ``src`` (from its start) to ``dst``: by the kernel where it can (sendfile)."""
    at, size = 0, os.fstat(src).st_size
    try:
        while at < size:
            n = os.sendfile(dst, src, at, min(size - at, 1 << 30))
            if n == 0:
                return
            at += n
        return
    except OSError as exc:
        import errno

        if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP) or at:
            raise
    while at < size:
        block = os.pread(src, _COPY, at)
        if not block:
            return
        view = memoryview(block)
        while view:
            view = view[os.write(dst, view):]
        at += len(block)


def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux ``PR_SET_PDEATHSIG``): a dump killed
    mid-way leaves no process behind writing a temporary file."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:  # the parent is gone already
        os._exit(1)
