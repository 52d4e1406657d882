"""Run several ``txn-audit`` command lines in one process, one after the other, so that they share
one Spark session (the JVM's start costs more than a small scan). Each command line gets its own
stdout, stderr and exit status, as ``python -m auditor.cli.main ARGS`` would: ``SystemExit``'s
code, or 1 and the traceback for an exception that escapes. A step may instead be a shell command
(``sh``: mounts inside a private mount namespace, copies), run by ``sh -ec``.

    python tests/cli_session.py STEPS.json RESULTS.json

STEPS.json is a list of ``{"name": ..., "argv": [...]}`` (with ``"env": {...}``: environment
variables set for that command only) or ``{"name": ..., "sh": "..."}``.
RESULTS.json is rewritten after every step (name, code, stdout, stderr, traceback and the
``time.monotonic()`` at its start and end), so a run killed by a timeout still shows which step
was running. Used by tests/test_hostile_catalogue.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
import traceback


def run_cli(argv: list[str]) -> dict:
    from auditor.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    code, tb = 0, None
    sys.argv = ["txn-audit", *argv]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            if isinstance(exc.code, str):
                err.write(exc.code + "\n")
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # noqa: BLE001 - what the interpreter would print, and its status
            tb = traceback.format_exc()
            err.write(tb)
            code = 1
    return {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(), "traceback": tb}


def main() -> None:
    steps_path, results_path = sys.argv[1:3]  # run_cli sets sys.argv
    with open(steps_path) as f:
        steps = json.load(f)
    results = []
    for step in steps:
        t0 = time.monotonic()
        if "sh" in step:
            r = subprocess.run(["sh", "-ec", step["sh"]], capture_output=True, text=True)
            res = {"code": r.returncode, "stdout": r.stdout, "stderr": r.stderr, "traceback": None}
        else:
            saved = {k: os.environ.get(k) for k in step.get("env", {})}
            os.environ.update(step.get("env", {}))
            try:
                res = run_cli(step["argv"])
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
        res.update(name=step["name"], t0=t0, t1=time.monotonic())
        results.append(res)
        with open(results_path, "w") as f:
            json.dump(results, f)
        sys.__stderr__.write(f"cli_session: {step['name']} exited {res['code']} after {res['t1'] - t0:.1f} s\n")


if __name__ == "__main__":
    main()
