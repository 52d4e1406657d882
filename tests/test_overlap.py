"""``dump``'s threads (auditor/dump/_overlap.py, the split window reads of
batch_columnar): the same bytes in the same order, the same errors at the same
points, and no thread or open generator left behind."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time

import pytest

from builders import data_batch
from conftest import PROJECT
from auditor.dump import _overlap as overlap
from auditor.formats import batch_columnar as bc


def _threads(name: str) -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(name) and t.is_alive())


def _wait_blocked_in_put(name: str, timeout: float = 30.0) -> None:
    """Return once the thread ``name`` waits inside ``queue.Queue.put`` (its queue is full): seen in
    the thread's own stack (``sys._current_frames``: Condition.wait called from Queue.put), not
    assumed after a delay."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        frames = sys._current_frames()
        for t in threading.enumerate():
            frame = frames.get(t.ident) if t.name == name else None
            stack = []
            while frame is not None:
                stack.append((os.path.basename(frame.f_code.co_filename), frame.f_code.co_name))
                frame = frame.f_back
            if stack and stack[0] == ("threading.py", "wait") and ("queue.py", "put") in stack:
                return
        threading.Event().wait(0.001)
    raise AssertionError(f"thread {name} never blocked in Queue.put")


def test_read_ahead_keeps_order_and_raises_where_the_source_raised():
    def source():
        yield from range(50)
        raise ValueError("at 50")

    got = []
    with pytest.raises(ValueError, match="at 50"):
        for item in overlap.read_ahead(source(), depth=3):
            got.append(item)
    assert got == list(range(50))  # every item before the error, then the error
    assert _threads("dump-read-ahead") == 0


def test_leaving_read_ahead_early_stops_its_thread_and_closes_the_source():
    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    ahead = overlap.read_ahead(endless(), depth=1)
    assert [next(ahead) for _ in range(5)] == [0, 1, 2, 3, 4]
    _wait_blocked_in_put("dump-read-ahead")  # item 5 waits in the queue, item 6 in the thread's put
    ahead.close()
    assert closed.is_set()  # the source's finally ran (dump: the window buffer released, the mmap closed)
    assert _threads("dump-read-ahead") == 0


def test_background_writer_writes_every_byte_in_order():
    out = io.BytesIO()
    w = overlap.BackgroundWriter(out)
    pieces = []
    for i in range(300):  # small writes gathered into blocks, big ones handed over whole, in between
        size = overlap.BLOCK + 17 if i % 50 == 7 else (i * 37) % 4000
        piece = bytes([i % 251]) * size
        pieces.append(piece)
        w.write(piece)
        if i == 100:
            w.flush()  # flush: everything written so far has reached ``out``
            assert out.getvalue() == b"".join(pieces)
    w.close()
    assert out.getvalue() == b"".join(pieces)
    assert _threads("dump-stdout") == 0


def test_background_writer_raises_a_write_error_in_the_caller():
    class Failing(io.RawIOBase):
        def writable(self):
            return True

        def write(self, b):
            raise BrokenPipeError(32, "Broken pipe")

    w = overlap.BackgroundWriter(Failing())  # type: ignore[arg-type]
    w.write(b"x" * (overlap.BLOCK + 1))
    with pytest.raises(BrokenPipeError):
        w.flush()
    with pytest.raises(BrokenPipeError):  # and from then on
        w.write(b"more")
    with pytest.raises(BrokenPipeError):
        w.close()
    assert _threads("dump-stdout") == 0


def test_split_window_reads_equal_one_read(tmp_path, monkeypatch):
    """With the helper thread a window is read in two halves; the bytes and the count
    are those of one read, also where the file ends inside either half."""
    data = os.urandom(3 * 4096 + 100)
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    bc.use_helper_thread()
    monkeypatch.setattr(bc, "_SPLIT_BYTES", 4096)
    with open(p, "rb", buffering=0) as f:
        for pos, want in [(0, 3 * 4096), (0, 4 * 4096), (100, 2 * 4096), (2 * 4096, 2 * 4096), (len(data), 8192)]:
            buf = bytearray(want)
            got = bc.read_at(f, memoryview(buf), pos)
            expect = data[pos:pos + want]
            assert got == len(expect) and bytes(buf[:got]) == expect, (pos, want)


def test_dump_into_a_closed_pipe_exits_quietly(tmp_path):
    """``txn-audit dump FILE | head -c 100``: the reader goes away mid-dump; the write
    error reaches the main thread, which exits with status 1 and no traceback."""
    d = tmp_path / "orders-0"
    d.mkdir()
    seg = d / "00000000000000000000.log"
    seg.write_bytes(b"".join(data_batch(i * 3, 3) for i in range(20000)))  # ~13 MB of JSON lines
    p = subprocess.Popen([sys.executable, "-m", "auditor.cli.main", "dump", str(seg)], cwd=PROJECT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    head = p.stdout.read(100)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 1
    assert head.startswith(b'{"type": "batch"')
    assert b"Traceback" not in err and b"Error" not in err, err
