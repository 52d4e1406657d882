"""``python -m scripts.capture`` (from the project root): the same command as scripts/capture_scenarios.py."""

import sys

from scripts.capture.driver import main

sys.exit(main())
