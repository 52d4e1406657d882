#!/usr/bin/env bash
# Resolve the Delta Lake jars (delta-spark + delta-storage, for the Scala 2.13 build PySpark 4.0
# uses) from Maven Central (cached in ~/.m2) into build/delta/jars and print that directory.
# Idempotent. get_spark() puts these jars on spark.jars; spark-submit users pass them with --jars.
set -euo pipefail
VERSION=${1:-4.0.1}   # keep in sync with delta-spark in pyproject.toml
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DEST="$ROOT/build/delta/jars"
if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$VERSION" ]; then echo "$DEST"; exit 0; fi
command -v mvn >/dev/null 2>&1 || { echo "delta/fetch.sh: mvn not found (apt-get install maven)" >&2; exit 2; }
rm -rf "$DEST" && mkdir -p "$DEST"
mvn -q -B -f "$HERE/pom.xml" -Ddelta.version="$VERSION" \
    dependency:copy-dependencies -DoutputDirectory="$DEST" -DincludeScope=runtime >&2
ls "$DEST"/delta-spark_2.13-"$VERSION".jar "$DEST"/delta-storage-"$VERSION".jar >/dev/null
echo "$VERSION" > "$DEST/.complete"
echo "$DEST"
