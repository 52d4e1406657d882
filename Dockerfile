# txn-audit: the CLI with an embedded Spark, or a driver/executor image for spark-submit.
# (This machine has no Docker engine; the image is built by CI elsewhere / by users.)
#
#   docker build -t txn-audit .
#   docker run --rm -v /var/lib/kafka/data:/logs:ro -v "$PWD/wh:/warehouse" txn-audit \
#       batch --input /logs --warehouse /warehouse
#
# Three stages, pinned: the project's wheels (with its pinned PySpark / delta-spark), the Delta jars
# resolved by the same scripts/delta/fetch.sh + pom.xml the host's `make setup` runs, and a slim
# runtime (Python + a headless JRE) that only receives the results of the other two.

FROM python:3.11.7-slim-bookworm AS wheels
# a C compiler for the package's one extension (auditor/dump/_dumpv2.c, `dump`'s inner loop)
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY auditor ./auditor
COPY rules ./rules
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM maven:3.9.9-eclipse-temurin-17 AS jars
WORKDIR /src
COPY scripts/delta/fetch.sh scripts/delta/pom.xml ./scripts/delta/
RUN bash scripts/delta/fetch.sh && rm -f build/delta/jars/.complete

FROM python:3.11.7-slim-bookworm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=wheels /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY --from=jars /src/build/delta/jars /opt/txn-audit/jars
COPY scripts/spark_submit_entry.py /opt/txn-audit/spark_submit_entry.py
# the driver JVM's class-data sharing archive (auditor/perf/jvmcache.py), trained on one sample
# capture: every embedded session of the image starts ~3 s sooner (never an error if it fails)
COPY sample_logs/hanging-late-write /tmp/cds-sample
RUN SPARK_LOCAL_IP=127.0.0.1 python -m auditor.perf.jvmcache /tmp/cds-sample && rm -rf /tmp/cds-sample
# get_spark() puts the Delta jars of TXN_AUDIT_DELTA_JARS on spark.jars (embedded and --master runs);
# spark-submit takes them with --jars (see docs/operations.md)
ENV PYSPARK_PYTHON=python3 \
    TXN_AUDIT_DELTA_JARS=/opt/txn-audit/jars \
    SPARK_LOCAL_IP=127.0.0.1
# inputs are mounted read-only (-v /var/lib/kafka:/logs:ro); tables go to a writable volume
ENTRYPOINT ["txn-audit"]
CMD ["--help"]
