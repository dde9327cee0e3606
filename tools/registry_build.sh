#!/usr/bin/env bash
# Build Apicurio Registry (a real, Confluent-compatible Schema Registry: its ccompat API under
# /apis/ccompat/v7) with Maven into a cache folder outside the repository, and print the folder
# holding quarkus-run.jar. Idempotent: a complete folder (stamped after a successful build) is
# reused without running Maven.
#   io.apicurio:apicurio-registry-app is a thin Quarkus application jar, not a runnable one: a
#   small pom that depends on it runs Quarkus's build (quarkus-maven-plugin), which augments it
#   into quarkus-app/. The app jar's own application.properties (build-time settings among them)
#   is copied into that pom's resources, since Quarkus reads only the application's own.
#   tools/registry_build.sh                        build (if needed) and print the folder
#   REGISTRY_VERSION=3.3.2 tools/registry_build.sh  another 3.x release
#   REGISTRY_CHECK_ONLY=1 tools/registry_build.sh   print the folder only if already built
# A failed build is not tried again for REGISTRY_RETRY_S seconds (default 6 h: Maven's answer is
# the same until the repository serves the missing artifacts); it repeats its reason at once.
set -euo pipefail
VERSION=${REGISTRY_VERSION:-3.3.3}
ROOT=${HEADRACE_REGISTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/headrace/registry}
DEST=$ROOT/$VERSION
APP=$DEST/quarkus-app
if [ -f "$DEST/.complete" ] && [ -f "$APP/quarkus-run.jar" ]; then
  echo "$APP"; exit 0
fi
[ -z "${REGISTRY_CHECK_ONLY:-}" ] || exit 0  # only asked whether it is built
FAILED=$DEST/.failed
if [ -f "$FAILED" ] && [ $(( $(date +%s) - $(stat -c %Y "$FAILED") )) -lt "${REGISTRY_RETRY_S:-21600}" ]; then
  echo "registry_build: an earlier build failed (REGISTRY_RETRY_S=0 tries again): $(cat "$FAILED")" >&2
  exit 1
fi
command -v mvn >/dev/null || { echo "registry_build: mvn (Maven) is not installed" >&2; exit 2; }
command -v java >/dev/null || { echo "registry_build: java (17+) is not installed" >&2; exit 2; }
mkdir -p "$DEST"
WORK=$(mktemp -d "$DEST/.build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
START=$(date +%s)
MVN=(mvn -q -B -Dstyle.color=never)
fail() {
  cat "$WORK/mvn.log" >&2
  # The first missing artifact, kept as the reason a later run repeats.
  why=$(grep -o 'Could not find artifact [^ ]*\|Could not transfer artifact [^ ]*' "$WORK/mvn.log" \
        | head -1)
  echo "$*${why:+ ($why)}" > "$FAILED"
  echo "registry_build: $*${why:+ ($why)}" >&2
  exit 1
}
# The parent pom carries the Quarkus version the app was built against; the app jar, its
# application.properties.
for a in "io.apicurio:apicurio-registry:$VERSION:pom" "io.apicurio:apicurio-registry-app:$VERSION"; do
  "${MVN[@]}" dependency:copy -Dartifact="$a" -DoutputDirectory="$WORK/dl" >"$WORK/mvn.log" 2>&1 \
    || fail "Maven could not fetch $a"
done
QUARKUS=$(sed -n 's:.*<quarkus.version>\(.*\)</quarkus.version>.*:\1:p' \
          "$WORK/dl/apicurio-registry-$VERSION.pom" | head -1)
[ -n "$QUARKUS" ] || { echo "registry_build: no quarkus.version in Apicurio's pom" >&2; exit 1; }
mkdir -p "$WORK/src/main/resources"
(cd "$WORK/src/main/resources" \
  && unzip -q -o "$WORK/dl/apicurio-registry-app-$VERSION.jar" application.properties) \
  || { echo "registry_build: the app jar has no application.properties" >&2; exit 1; }
cat > "$WORK/pom.xml" <<POM
<project>
  <modelVersion>4.0.0</modelVersion>
  <groupId>headrace.tools</groupId>
  <artifactId>headrace-registry</artifactId>
  <version>1</version>
  <packaging>jar</packaging>
  <properties>
    <maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding>
  </properties>
  <dependencyManagement>
    <dependencies>
      <!-- Apicurio's own version alignment (it imports Quarkus's bom). -->
      <dependency><groupId>io.apicurio</groupId><artifactId>apicurio-registry</artifactId>
        <version>$VERSION</version><type>pom</type><scope>import</scope></dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency><groupId>io.apicurio</groupId><artifactId>apicurio-registry-app</artifactId>
      <version>$VERSION</version></dependency>
  </dependencies>
  <build>
    <plugins>
      <plugin><groupId>io.quarkus</groupId><artifactId>quarkus-maven-plugin</artifactId>
        <version>$QUARKUS</version>
        <executions><execution><goals><goal>build</goal></goals></execution></executions>
      </plugin>
    </plugins>
  </build>
</project>
POM
# Maven's output is shown only when it fails.
(cd "$WORK" && "${MVN[@]}" package -DskipTests >"$WORK/mvn.log" 2>&1) \
  || fail "Quarkus could not build Apicurio Registry $VERSION (Quarkus $QUARKUS)"
[ -f "$WORK/target/quarkus-app/quarkus-run.jar" ] || fail "the build left no quarkus-run.jar"
rm -rf "$APP"
mv "$WORK/target/quarkus-app" "$APP"
rm -f "$FAILED"
touch "$DEST/.complete"
echo "registry_build: Apicurio Registry $VERSION built in $(( $(date +%s) - START )) s" >&2
echo "$APP"
