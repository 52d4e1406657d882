#!/usr/bin/env bash
# Resolve the jars of an Apache Hadoop NameNode + DataNode (hadoop-hdfs, hadoop-hdfs-client,
# hadoop-common and their runtime dependencies: 118 jars, 64 MB) from Maven Central (cached in
# ~/.m2) into build/hdfs/jars and print that directory. Idempotent. The tests' single-host HDFS
# (scripts/hdfs/harness.py, scripts/hdfs/MiniHdfs.java) runs from them. Same steps as
# scripts/delta/fetch.sh, which stays self-contained (the Dockerfile copies it alone).
set -euo pipefail
VERSION=${1:-3.4.1}   # the Hadoop client PySpark 4.0 ships; the default of hadoop.version in pom.xml
HERE=$(cd "$(dirname "$0")" && pwd)
DEST="$(cd "$HERE/../.." && pwd)/build/hdfs/jars"
if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$VERSION" ]; then echo "$DEST"; exit 0; fi
command -v mvn >/dev/null 2>&1 || { echo "hdfs/fetch.sh: mvn not found (apt-get install maven)" >&2; exit 2; }
rm -rf "$DEST" && mkdir -p "$DEST"
mvn -q -B -f "$HERE/pom.xml" -Dhadoop.version="$VERSION" \
    dependency:copy-dependencies -DoutputDirectory="$DEST" -DincludeScope=runtime >&2
ls "$DEST/hadoop-hdfs-$VERSION.jar" "$DEST/hadoop-common-$VERSION.jar" >/dev/null
echo "$VERSION" > "$DEST/.complete"
echo "$DEST"
