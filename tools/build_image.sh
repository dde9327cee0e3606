#!/usr/bin/env bash
# Build the CPU container image without Docker or a registry (ENGINEERING.md §9):
# a Debian bookworm rootfs from mmdebstrap, the project installed offline from wheels built on
# this host into /opt/headrace, one layer written with umoci, an oci-archive from skopeo.
#
#   tools/build_image.sh [--reuse] [--out DIR]
#
# --reuse   keep the existing image when its inputs (pyproject.toml, README.md, headrace/, this
#           script) are unchanged since it was built
# --out     output folder (default build/image in the checkout, gitignored): oci/ (OCI layout), headrace-VERSION.tar
#           (oci-archive), image.env (digest, size, inputs hash)
# Needs root and the Debian packages mmdebstrap, umoci and skopeo (`./dev image` installs them),
# the host's Python 3.11 (the wheels must match the rootfs's python3) and PyPI + Debian mirrors.
set -euo pipefail
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=$HERE/build/image
REUSE=0
while [ $# -gt 0 ]; do
  case "$1" in
    --reuse) REUSE=1 ;;
    --out) OUT=${2:?--out needs a folder}; shift ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_image: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # a relative --out is where you are, not the checkout
cd "$HERE"
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
SUITE=bookworm
UID_GID=10001:10001

die() { echo "build_image: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (mmdebstrap's root mode and chroot)"
for t in mmdebstrap umoci skopeo; do
  command -v "$t" >/dev/null || die "$t is missing: apt-get install mmdebstrap umoci skopeo (or ./dev image)"
done
HOST_PY=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$HOST_PY" = 3.11 ] || die "the host Python is $HOST_PY; the wheels must be built for $SUITE's 3.11"

# The project's sources: what git tracks (or would), nothing ignored, nothing built.
sources() {
  if git rev-parse --git-dir >/dev/null 2>&1; then
    git ls-files -co --exclude-standard -- pyproject.toml README.md headrace helm | sort
  else
    { echo pyproject.toml; echo README.md; find headrace helm \( -type f -o -type l \) ! -path '*/__pycache__/*'; } | sort
  fi
}
INPUTS=$( { sources | while read -r f; do [ -f "$f" ] && sha256sum "$f"; done
            sha256sum tools/build_image.sh; } | sha256sum | cut -c1-16)
VERSION=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
ARCHIVE=$OUT/headrace-$VERSION.tar

report() {
  # shellcheck disable=SC1091
  . "$OUT/image.env"
  echo "image:   $ARCHIVE (oci-archive, ref $VERSION)"
  echo "digest:  $DIGEST"
  echo "size:    $SIZE_MB MB compressed, $UNPACKED_MB MB unpacked"
}
if [ "$REUSE" = 1 ] && [ -f "$ARCHIVE" ] && [ -f "$OUT/image.env" ] \
   && grep -qx "INPUTS=$INPUTS" "$OUT/image.env"; then
  echo "build_image: inputs unchanged ($INPUTS), reusing the built image"
  report
  exit 0
fi

# The build holds the wheels, the root filesystem and the compressed layer at once; say so
# up front rather than with umoci's "no space left on device" minutes in.
NEED_GB=5
FREE_GB=$(df -Pk "$OUT" | awk 'NR == 2 {print int($4 / 1048576)}')
[ "$FREE_GB" -ge "$NEED_GB" ] || die "needs ${NEED_GB} GB free under $OUT, has ${FREE_GB} GB"

t0=$(date +%s)
step() { echo "== $(( $(date +%s) - t0 ))s $*"; }
WORK=$OUT/work
rm -rf "$WORK" "$OUT/oci" "$ARCHIVE" "$OUT/image.env"
mkdir -p "$WORK/src"
trap 'rm -rf "$WORK"' EXIT

step "wheels for headrace[all] (host $PY)"
sources | tar -cf - -T - | tar -xf - -C "$WORK/src"
"$PY" -m pip wheel --quiet --disable-pip-version-check -w "$WORK/wheels" "$WORK/src[all]"
rm -rf "$WORK/src"

step "rootfs: Debian $SUITE minbase + python3 (mmdebstrap)"
# No docs, man pages or locales: the image runs one program. apt's lists and caches are
# removed by mmdebstrap's cleanup. The mirror is the default one (or a sources.list on stdin).
# libgomp1 and libquadmath0: MXNet's libmxnet.so links them from the system.
ROOTFS=$WORK/rootfs
mmdebstrap --quiet --variant=minbase \
  --include=python3,python3-venv,ca-certificates,tzdata,libgomp1,libquadmath0 \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  "$SUITE" "$ROOTFS" </dev/null
ROOT_PY=$(chroot "$ROOTFS" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$ROOT_PY" = "$HOST_PY" ] || die "rootfs python3 is $ROOT_PY, host wheels are for $HOST_PY"

step "venv /opt/headrace from the wheels only (no index)"
mkdir -p "$ROOTFS/tmp/wheels"
cp -l "$WORK/wheels"/* "$ROOTFS/tmp/wheels/" 2>/dev/null || cp "$WORK/wheels"/* "$ROOTFS/tmp/wheels/"
chroot "$ROOTFS" python3 -m venv /opt/headrace
chroot "$ROOTFS" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root PIP_NO_CACHE_DIR=1 \
  PIP_DISABLE_PIP_VERSION_CHECK=1 \
  /opt/headrace/bin/pip install --quiet --no-index --find-links /tmp/wheels 'headrace[all]'
rm -rf "$ROOTFS/tmp/wheels" "$ROOTFS/root/.cache"
# The packages' own test suites are never imported at run time (~100 MB). Keep compiled
# bytecode: the root filesystem is read-only, so Python could not write it at each start.
find "$ROOTFS/opt/headrace/lib" -depth -type d -name tests \
  \( -path '*/site-packages/numpy/*' -o -path '*/site-packages/pyarrow/*' \
     -o -path '*/site-packages/matplotlib/*' -o -path '*/site-packages/pandas/*' \
     -o -path '*/site-packages/kubernetes/*' -o -path '*/site-packages/pydantic/*' \) \
  -exec rm -rf {} +

step "user 10001, /dfs, /tmp"
echo "headrace:x:10001:10001:headrace:/tmp:/usr/sbin/nologin" >> "$ROOTFS/etc/passwd"
echo "headrace:x:10001:" >> "$ROOTFS/etc/group"
echo "headrace:!:19000::::::" >> "$ROOTFS/etc/shadow"
mkdir -p "$ROOTFS/dfs"
chown "$UID_GID" "$ROOTFS/dfs"
chmod 1777 "$ROOTFS/tmp"
UNPACKED_MB=$(du -sm --exclude=./dev "$ROOTFS" | cut -f1)

step "OCI layout: one layer of ${UNPACKED_MB} MB (tar | umoci)"
REF="$OUT/oci:$VERSION"
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
CREATED=$(date -u -d "@${SOURCE_DATE_EPOCH:-$(date +%s)}" +%Y-%m-%dT%H:%M:%SZ)
umoci init --layout "$OUT/oci"
umoci new --image "$REF"
# The tar streams through a pipe into umoci (which gzips it): 2.5 GB never touch the disk twice.
# Device nodes, /proc and /sys come from the runtime, never from the image.
mkfifo "$WORK/layer.tar"
tar --numeric-owner --sort=name --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' \
  -C "$ROOTFS" -cf "$WORK/layer.tar" . &
TAR_PID=$!
umoci raw add-layer --image "$REF" "$WORK/layer.tar"
wait "$TAR_PID" || die "tar of the root filesystem failed"
rm -rf "$ROOTFS" "$WORK/layer.tar"
ENVS=(
  PATH=/opt/headrace/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  LANG=C.UTF-8 PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
  HOME=/tmp XDG_CACHE_HOME=/tmp/.cache XDG_CONFIG_HOME=/tmp/.config
  XDG_DATA_HOME=/tmp/.local/share XDG_STATE_HOME=/tmp/.local/state
  MPLCONFIGDIR=/tmp/.config/matplotlib KERAS_HOME=/tmp/.keras MXNET_HOME=/tmp/.mxnet
  TF_CPP_MIN_LOG_LEVEL=1 HEADRACE_DFS_ROOT=/dfs
)
LABELS=(
  org.opencontainers.image.title=headrace
  "org.opencontainers.image.description=Headrace: event-driven ML pipeline on Kafka and Kubernetes (control plane, trainers, scorers; CPU)"
  "org.opencontainers.image.version=$VERSION"
  "org.opencontainers.image.revision=$REVISION"
  "org.opencontainers.image.created=$CREATED"
  org.opencontainers.image.licenses=Apache-2.0
  "org.opencontainers.image.base.name=debian:$SUITE"
)
args=()
for e in "${ENVS[@]}"; do args+=(--config.env "$e"); done
for l in "${LABELS[@]}"; do args+=(--config.label "$l" --manifest.annotation "$l"); done
umoci config --image "$REF" --os linux --architecture amd64 --created "$CREATED" \
  --author headrace --config.user "$UID_GID" --config.workingdir /tmp \
  --config.entrypoint headrace --config.volume /tmp --config.volume /dfs \
  --history.created_by "tools/build_image.sh (mmdebstrap $SUITE, headrace[all] $VERSION)" \
  "${args[@]}"
umoci gc --layout "$OUT/oci"

step "oci-archive (skopeo)"
skopeo copy --quiet "oci:$REF" "oci-archive:$ARCHIVE:$VERSION"
DIGEST=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' \
  "$OUT/oci/index.json")
SIZE_MB=$(( $(stat -c %s "$ARCHIVE") / 1000000 ))
cat > "$OUT/image.env" <<EOF
INPUTS=$INPUTS
VERSION=$VERSION
DIGEST=$DIGEST
SIZE_MB=$SIZE_MB
UNPACKED_MB=$UNPACKED_MB
BUILD_S=$(( $(date +%s) - t0 ))
EOF
step "done"
report
