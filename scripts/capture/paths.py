"""Where captures go and where brokers run.

``sample_logs/`` is only the default destination: :func:`scripts.capture.driver.capture` and
:func:`scripts.capture.driver.run_mutation` take the output directory as an argument (``--out``), so a
capture can be made elsewhere (another Kafka version, a check against the committed one)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_LOGS = ROOT / "sample_logs"
WORK = ROOT / "build" / "capture"  # broker work dirs, build/capture/<scenario>/
GENERATED_BY = "scripts/capture_scenarios.py"  # written into every expected.json
