"""A real node_exporter and a real Prometheus for tests/test_prometheus.py.

Each is the Debian package's binary (``prometheus-node-exporter``, ``prometheus``; installed by
``scripts/setup.sh VENV test``), started by the test itself on a free port of 127.0.0.1 with its
own configuration and data directory under the test's temporary directory, and stopped by it:
never the system services the packages install. The HTTP API is read with the standard library.
Also the tables of docs/operations.md's metrics section (:func:`doc_table`), which the tests hold
equal to the code's registry and to the rules file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from conftest import PROJECT
from scripts.kafka.harness import free_port

T = TypeVar("T")
SECTION = "## Metrics and alerts (Prometheus)"  # of docs/operations.md


def binary(*names: str) -> str:
    """The path of a Prometheus tool (the first of ``names`` found: Debian's name, then upstream's); a
    clear failure, not a skip, when the set-up did not install it."""
    path = next(filter(None, map(shutil.which, names)), None)
    assert path, f"{names[0]} is not installed: scripts/setup.sh VENV test installs the Debian packages " \
                 "prometheus and prometheus-node-exporter"
    return path


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 60.0, every: float = 0.2) -> T:
    """Poll ``probe`` until it returns something truthy (returned), failing after ``timeout`` s with
    ``what`` and the probe's last answer: the condition, not a guessed delay."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except OSError as exc:  # not listening yet
            last = exc  # type: ignore[assignment]
        else:
            if last:
                return last
        time.sleep(every)
    raise AssertionError(f"waited {timeout:.0f} s for {what}; last: {last!r}")


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read()


@contextmanager
def _running(cmd: list[str], log: Path, ready_url: str) -> Iterator[str]:
    """``cmd`` running, its output in ``log``, once ``ready_url`` answers; stopped (SIGTERM, then
    SIGKILL) on the way out, the test's failure or not."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    def answers() -> bool:
        if proc.poll() is None:
            _get(ready_url)  # OSError (refused, 503 while starting): not yet
        return True  # answering, or exited (said below)

    try:
        wait_for(answers, f"{Path(cmd[0]).name} to answer {ready_url}", timeout=30)
        assert proc.poll() is None, f"{cmd[0]} exited {proc.returncode}: {log.read_text()[-2000:]}"
        yield ready_url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def node_exporter(textfile_dir: Path, work: Path) -> Iterator[str]:
    """node_exporter with its textfile collector alone, reading ``textfile_dir``; yields host:port."""
    port = free_port()
    cmd = [binary("prometheus-node-exporter", "node_exporter"), f"--web.listen-address=127.0.0.1:{port}",
           "--collector.disable-defaults", "--collector.textfile", f"--collector.textfile.directory={textfile_dir}"]
    with _running(cmd, work / "node_exporter.log", f"http://127.0.0.1:{port}/metrics"):
        yield f"127.0.0.1:{port}"


@contextmanager
def prometheus(target: str, rules: Path, work: Path, interval: str = "1s") -> Iterator["Prometheus"]:
    """Prometheus scraping ``target`` (job ``node``) and evaluating ``rules``, both every ``interval``,
    with its configuration and TSDB under ``work``."""
    port = free_port()
    config = work / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(rules)],
        "scrape_configs": [{"job_name": "node", "static_configs": [{"targets": [target]}]}],
    }))
    cmd = [binary("prometheus"), f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
           f"--web.listen-address=127.0.0.1:{port}"]
    with _running(cmd, work / "prometheus.log", f"http://127.0.0.1:{port}/-/ready"):
        yield Prometheus(f"http://127.0.0.1:{port}")


class Prometheus:
    """The few calls of Prometheus's HTTP API (``/api/v1``) the test makes."""

    def __init__(self, base: str) -> None:
        self.base = base

    def api(self, path: str, **params: str) -> object:
        body = json.loads(_get(f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}"))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str) -> list[dict]:
        """An instant query's result (a vector, or a matrix for a range selector)."""
        return self.api("query", query=promql)["result"]

    def alerts(self, name: str) -> list[dict]:
        """The active (pending or firing) alerts named ``name``."""
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name]

    def state(self, name: str) -> str | None:
        """``pending``, ``firing`` or None (inactive) of the alert named ``name`` (one series)."""
        active = self.alerts(name)
        assert len(active) <= 1, active
        return active[0]["state"] if active else None

    def alert_samples(self, name: str, window: str = "10m") -> dict[str, list[float]]:
        """The raw samples of the ``ALERTS`` series of ``name`` over ``window``: state -> their
        timestamps (Unix seconds), as Prometheus stored them at each rule evaluation."""
        out: dict[str, list[float]] = {}
        for series in self.query(f'ALERTS{{alertname="{name}"}}[{window}]'):
            out.setdefault(series["metric"]["alertstate"], []).extend(float(t) for t, _v in series["values"])
        return {k: sorted(v) for k, v in out.items()}


def doc_table(header: str) -> list[list[str]]:
    """The rows of the table of docs/operations.md's metrics section whose header row starts with
    ``header``, cells stripped: what the tests compare with the code and the rules."""
    text = (PROJECT / "docs" / "operations.md").read_text()
    start = text.index(SECTION + "\n")
    lines = text[start:text.find("\n## ", start + len(SECTION))].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[first + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows
