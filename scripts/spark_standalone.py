"""A throwaway Spark standalone cluster on 127.0.0.1: one master, one worker,
started from the PySpark installed in the venv (``spark-class``), for the
cluster test and the batch figures.

    with StandaloneCluster(work_dir) as c:   # c.url == "spark://127.0.0.1:<port>"
        subprocess.run([spark-submit, "--master", c.url, ...])

Both JVMs get PR_SET_PDEATHSIG, so they die with the process that started them;
``stop()`` kills the worker (and the executors it launched) and then the master.
``python scripts/spark_standalone.py`` keeps one running until Ctrl-C.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pdeathsig() -> None:  # in the child, between fork and exec
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
    os.setpgrp()


class StandaloneCluster:
    def __init__(self, work_dir: Path, *, cores: int = 1, memory: str = "1g", timeout: float = 120.0) -> None:
        self.work_dir = Path(work_dir)
        self.cores, self.memory, self.timeout = cores, memory, timeout
        self.port = _free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        bin_dir = Path(sys.executable).parent
        self.spark_class = str(bin_dir / "spark-class")

    def _env(self) -> dict:
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(self.work_dir / "worker"),
               "PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1"}
        return env

    def _start(self, name: str, args: list[str], ready: str) -> None:
        log = self.work_dir / f"{name}.log"
        with open(log, "wb") as out:
            p = subprocess.Popen([self.spark_class, *args], stdout=out, stderr=subprocess.STDOUT, env=self._env(),
                                 preexec_fn=_pdeathsig, cwd=self.work_dir)
        self.procs.append(p)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise RuntimeError(f"spark {name} exited ({p.returncode}): {log.read_text()[-2000:]}")
            if ready in log.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise TimeoutError(f"spark {name} not ready after {self.timeout}s: {log.read_text()[-2000:]}")

    def start(self) -> "StandaloneCluster":
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(self.port), "--webui-port", "0"], "I have been elected leader")
            self._start("worker", ["org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                                   "--webui-port", "0", "--cores", str(self.cores), "--memory", self.memory,
                                   "--work-dir", str(self.work_dir / "worker")],
                        "Successfully registered with master")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):  # the worker first: it takes its executors down
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        self.procs.clear()

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


if __name__ == "__main__":
    import tempfile

    with StandaloneCluster(Path(tempfile.mkdtemp(prefix="spark-standalone-"))) as c:
        print(c.url, flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
