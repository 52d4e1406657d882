# txn-audit: the CLI with an embedded Spark, or a driver/executor image for spark-submit.
# (This machine has no Docker engine; the image is built by CI elsewhere / by users.)
FROM python:3.11.7-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY auditor ./auditor
COPY rules ./rules
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11.7-slim-bookworm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY scripts/spark_submit_entry.py /opt/txn-audit/spark_submit_entry.py
ENV PYSPARK_PYTHON=python3 \
    SPARK_LOCAL_IP=127.0.0.1
# inputs are mounted read-only (-v /var/lib/kafka:/logs:ro); tables go to a writable volume
ENTRYPOINT ["txn-audit"]
CMD ["--help"]
