#!/usr/bin/env bash
# Resolve Apache Kafka (the KRaft broker, its tools and their runtime dependencies) with Maven into
# a cache folder outside the repository, and print that lib folder. Idempotent: a complete folder
# (stamped after a successful copy) is reused without running Maven. Maven's default repository is
# the only source; no jar is ever committed.
#   tools/kafka_jars.sh            resolve (if needed) and print the lib folder
#   KAFKA_VERSION=4.3.1 tools/kafka_jars.sh   another 4.x release
set -euo pipefail
VERSION=${KAFKA_VERSION:-4.4.0}
ROOT=${HEADRACE_KAFKA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/headrace/kafka}
DEST=$ROOT/$VERSION
LIB=$DEST/lib
if [ -f "$DEST/.complete" ] && [ -d "$LIB" ]; then
  echo "$LIB"; exit 0
fi
command -v mvn >/dev/null || { echo "kafka_jars: mvn (Maven) is not installed" >&2; exit 2; }
command -v java >/dev/null || { echo "kafka_jars: java (17+) is not installed" >&2; exit 2; }
mkdir -p "$DEST"
WORK=$(mktemp -d "$DEST/.resolve.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# kafka_2.13 is the broker (kafka.Kafka, kafka.tools.StorageTool); kafka-tools adds the console
# clients; log4j-core and the slf4j 1.x binding (Kafka logs through slf4j 1.7) let the broker log
# through log4j2 with the config the launcher writes.
cat > "$WORK/pom.xml" <<POM
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>headrace.tools</groupId>
  <artifactId>kafka-classpath</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>$VERSION</version></dependency>
    <dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId>
      <version>$VERSION</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>2.24.3</version></dependency>
    <dependency><groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>2.24.3</version></dependency>
  </dependencies>
</project>
POM
# Maven's output is shown only when it fails.
if ! (cd "$WORK" && mvn -q -B -Dstyle.color=never dependency:copy-dependencies \
      -DincludeScope=runtime -DoutputDirectory="$WORK/lib" >"$WORK/mvn.log" 2>&1); then
  cat "$WORK/mvn.log" >&2
  echo "kafka_jars: Maven could not resolve Apache Kafka $VERSION" >&2
  exit 1
fi
rm -rf "$LIB"
mv "$WORK/lib" "$LIB"
touch "$DEST/.complete"
echo "$LIB"
