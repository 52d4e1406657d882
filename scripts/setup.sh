#!/usr/bin/env bash
# Build the project's virtualenv from scratch. Idempotent.
#   scripts/setup.sh VENV demo   what `make demo` runs: Java (for Spark) and the package's runtime
#                                dependencies — nothing else
#   scripts/setup.sh VENV test   also what the tests need: dev extras (pytest, hypothesis, Kafka
#                                clients, moto's S3 server), mvn and the Kafka broker jars, the Delta
#                                jars, the Hadoop HDFS jars, Chromium
set -euo pipefail
VENV=${1:-.venv}
MODE=${2:-test}
case "$MODE" in demo|test) ;; *) echo "setup: mode must be demo or test, not $MODE" >&2; exit 2;; esac

if ! command -v java >/dev/null 2>&1; then
  echo "setup: installing a Java runtime for Spark" >&2
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jre-headless
  else
    echo "setup: no java and no apt-get: install Java 17+ first" >&2; exit 2
  fi
fi

PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
if [ "$MODE" = demo ]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e .
  echo "setup: $VENV ready for the demo" >&2
  exit 0
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e '.[dev]'

# Real Apache Kafka brokers for tests/test_live_broker.py and scripts/capture_scenarios.py:
# jars resolved from Maven Central with mvn (cached in ~/.m2) into build/kafka/<version>/libs.
if ! command -v mvn >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing maven (resolves the Kafka broker jars)" >&2
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q maven
  else
    echo "setup: no mvn and no apt-get: install Maven to run the live-broker tests" >&2; exit 2
  fi
fi
# The Java producer bridge (scripts/kafka/java) and the tests' HDFS (scripts/hdfs/MiniHdfs.java) run
# through the JDK's source launcher: a JDK, not only the JRE Spark needs.
if ! command -v javac >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing a JDK (the source launcher of the Java test helpers)" >&2
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless
  else
    echo "setup: no javac and no apt-get: install a Java 17 JDK to run the live-broker and HDFS tests" >&2; exit 2
  fi
fi
for KAFKA_VERSION in 4.4.0 4.3.1 3.5.2; do   # keep in sync with scripts/kafka/harness.py VERSIONS
  bash scripts/kafka/fetch.sh "$KAFKA_VERSION" >/dev/null
done
# Delta Lake jars for `txn-audit batch` (its tables are Delta tables): delta-spark + delta-storage for
# PySpark's Scala 2.13, resolved from Maven Central with mvn into build/delta/jars (get_spark loads them).
bash scripts/delta/fetch.sh >/dev/null
# Apache Hadoop's NameNode + DataNode (hadoop-hdfs, hadoop-hdfs-client, hadoop-common: 118 jars, 64 MB)
# from Maven Central into build/hdfs/jars: the real HDFS tests/test_hdfs.py starts (scripts/hdfs/harness.py).
bash scripts/hdfs/fetch.sh >/dev/null
# Headless Chromium for tests/test_report_html.py (renders the HTML report, checks the console, screenshots).
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing chromium (headless checks of the HTML report)" >&2
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
  else
    echo "setup: no chromium and no apt-get: install Chromium to run the HTML report tests" >&2; exit 2
  fi
fi
# Prometheus (with promtool) and node_exporter for tests/test_prometheus.py and tests/test_metrics.py:
# promtool checks the metrics file and the alert rules of docs/prometheus/; the test starts its own
# prometheus and node_exporter on free ports with their own config and data. The packages' own
# services are not wanted: on a host run by systemd, those of the packages this step installs are
# stopped and disabled.
PROMETHEUS_PACKAGES=""
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  PROMETHEUS_PACKAGES="prometheus"
fi
if ! command -v prometheus-node-exporter >/dev/null 2>&1 && ! command -v node_exporter >/dev/null 2>&1; then
  PROMETHEUS_PACKAGES="$PROMETHEUS_PACKAGES prometheus-node-exporter"
fi
if [ -n "$PROMETHEUS_PACKAGES" ]; then
  if command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing$PROMETHEUS_PACKAGES (the metrics file and alert rules tests)" >&2
    # shellcheck disable=SC2086 # one word per package
    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $PROMETHEUS_PACKAGES
    if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
      systemctl disable --now $PROMETHEUS_PACKAGES >/dev/null 2>&1 || true
    fi
  else
    echo "setup: no prometheus/node_exporter and no apt-get: install Prometheus 2.x (prometheus, promtool) and" \
         "node_exporter to run the metrics tests" >&2; exit 2
  fi
fi
# The driver JVM's class-data sharing archive (auditor/perf/jvmcache.py): one training scan of a
# sample capture (about a minute), then every embedded Spark session of the tests starts ~3 s sooner.
# `make jvm-cache` builds it for a demo install; its absence is never an error.
"$VENV/bin/python" -m auditor.perf.jvmcache sample_logs/hanging-late-write
echo "setup: $VENV ready" >&2
