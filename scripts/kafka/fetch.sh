#!/usr/bin/env bash
# Resolve the jars of Apache Kafka VERSION from Maven Central (cached in ~/.m2) into
# build/kafka/VERSION/libs and print that directory. Idempotent.
set -euo pipefail
VERSION=${1:?usage: fetch.sh KAFKA_VERSION}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DEST="$ROOT/build/kafka/$VERSION/libs"
if [ -f "$DEST/.complete" ]; then echo "$DEST"; exit 0; fi
command -v mvn >/dev/null 2>&1 || { echo "fetch.sh: mvn not found (apt-get install maven)" >&2; exit 2; }
rm -rf "$DEST" && mkdir -p "$DEST"
mvn -q -B -f "$HERE/pom.xml" -Dkafka.version="$VERSION" \
    dependency:copy-dependencies -DoutputDirectory="$DEST" -DincludeScope=runtime >&2
touch "$DEST/.complete"
echo "$DEST"
