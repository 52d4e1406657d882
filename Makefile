# Two entry points (see README): `make demo` and `make test`.
# Both build .venv from pyproject.toml on first use; nothing is installed by hand.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
SAMPLES := $(sort $(wildcard sample_logs/*/))
OUT ?= build/demo

.PHONY: setup setup-demo demo test zip clean jvm-cache

# everything: what the tests need (dev extras, Kafka broker jars, Delta jars, HDFS jars, Chromium)
setup: $(STAMP)

$(STAMP): pyproject.toml setup.py auditor/dump/_dumpv2.c scripts/setup.sh scripts/delta/fetch.sh scripts/delta/pom.xml scripts/kafka/pom.xml \
          scripts/hdfs/fetch.sh scripts/hdfs/pom.xml
	bash scripts/setup.sh $(VENV) test
	touch $(STAMP) $(DEMO_STAMP)

# only what the demo runs: Java and the package's runtime dependencies
setup-demo: $(DEMO_STAMP)

$(DEMO_STAMP): pyproject.toml setup.py auditor/dump/_dumpv2.c scripts/setup.sh
	bash scripts/setup.sh $(VENV) demo
	touch $(DEMO_STAMP)

# the driver JVM's class-data sharing archive (auditor/perf/jvmcache.py): ~1 min once, then every
# scan starts ~3 s sooner; `make setup` builds it, a demo install only when asked
jvm-cache: setup-demo
	$(PY) -m auditor.perf.jvmcache sample_logs/hanging-late-write

# ends on the scan's report (the last thing printed); the tables stay in $(OUT)/tables for
# `txn-audit tables`, `timeline` and `coordinator`. --exit-zero: findings are what the demo shows.
demo: setup-demo
	rm -rf $(OUT)
	$(VENV)/bin/txn-audit scan $(SAMPLES) --tables $(OUT)/tables --out $(OUT)/findings --exit-zero

test: setup
	$(PY) -m pytest -q tests

# the package as a zip for spark-submit --py-files
zip: setup
	rm -f build/txn_audit.zip
	$(PY) scripts/package_zip.py build/txn_audit.zip

clean:
	rm -rf build .pytest_cache
