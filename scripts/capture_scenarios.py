#!/usr/bin/env python3
"""Capture real Kafka broker log dirs into ``sample_logs/<scenario>/`` with their ground truth.

The command line of the package ``scripts/capture/`` (its docstring says what a capture is and how
the package is laid out); ``python -m scripts.capture`` from the project root is the same.

Usage::

    .venv/bin/python scripts/capture_scenarios.py               # all scenarios (~3.5 min)
    .venv/bin/python scripts/capture_scenarios.py --only clean  # one (mutations need their base)
    .venv/bin/python scripts/capture_scenarios.py --list
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    # run as a file, this script's directory (scripts/) comes first on sys.path; the package is
    # imported from the project root, as the tests import it
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from scripts.capture.driver import main

    sys.exit(main())
