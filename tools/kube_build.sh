#!/usr/bin/env bash
# Build a real Kubernetes control plane for the tests from the Go module proxy, into a cache folder
# outside the repository, and print that folder. Idempotent: a complete folder (stamped after every
# binary built) is reused without running Go.
#   kube-apiserver, kube-scheduler, kube-controller-manager: a wrapper module that requires
#     k8s.io/kubernetes at the tag and pins each k8s.io/* staging module (v0.0.0 plus a replace to
#     ./staging in kubernetes' own go.mod) to the matching v0.x.y;
#   kwok: sigs.k8s.io/kwok (simulated nodes and pod lifecycles);
#   etcd: Debian's etcd-server 3.4 (accepted by Kubernetes 1.36), else go.etcd.io/etcd/server/v3
#     from the module proxy (KUBE_ETCD_FROM_PROXY=1 forces that);
#   kueue and jobset: sigs.k8s.io/kueue (gang admission against quota) and sigs.k8s.io/jobset
#     (a multi-role gang as one object), each with its CRDs and webhook configurations from the
#     same module, for tools/kueue.py and tools/jobset.py.
#   node (only when asked: `tools/kube_build.sh node`): a real node beside them (tools/kube_node.py):
#     kubelet from k8s.io/kubernetes/cmd/kubelet with the same pins; Debian's containerd, runc and
#     CNI plugins (installed when root); two images written without a registry into images/ as
#     docker-archives: the pod sandbox (Kubernetes' own build/pause/linux/pause.c, compiled static)
#     and a busybox (Debian's busybox-static) for pods that run a shell.
#   tools/kube_build.sh                          build (if needed) and print the bin folder
#   tools/kube_build.sh node                     the same, plus the real node's kubelet and images
#   KUBE_VERSION=v1.35.4 tools/kube_build.sh     another release (its v0.x.y staging modules must be served)
#   KUBE_CHECK_ONLY=1 tools/kube_build.sh [node] print the folder only if already built
set -euo pipefail
TARGET=${1:-control-plane}
case "$TARGET" in
  control-plane|node) ;;
  *) echo "kube_build: unknown target $TARGET (control-plane or node)" >&2; exit 2 ;;
esac
VERSION=${KUBE_VERSION:-v1.36.3}
KWOK_VERSION=${KWOK_VERSION:-v0.7.0}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
JOBSET_VERSION=${JOBSET_VERSION:-v0.11.1}
ROOT=${HEADRACE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/headrace/kube}
DEST=$ROOT/$VERSION
BIN=$DEST/bin
if [ -f "$DEST/.complete" ] && [ -f "$DEST/kueue/webhooks.yaml" ] && [ -f "$DEST/jobset/webhooks.yaml" ] \
   && { [ "$TARGET" != node ] || [ -f "$DEST/.node-complete" ]; }; then
  echo "$BIN"; exit 0
fi
[ -z "${KUBE_CHECK_ONLY:-}" ] || exit 0  # only asked whether they are cached
command -v go >/dev/null || { echo "kube_build: go (1.25+) is not installed" >&2; exit 2; }
mkdir -p "$BIN"
WORK=$DEST/.work
mkdir -p "$WORK"
# -p bounds parallel compiles (memory); the default 2 suits a small machine.
PAR=${KUBE_BUILD_PARALLEL:-2}
export GOFLAGS="-p=$PAR -buildvcs=false" CGO_ENABLED=0
START=$(date +%s)
STAGING=${VERSION/#v1./v0.}
log() { echo "kube_build: $*" >&2; }

# The wrapper module that requires k8s.io/kubernetes at the tag (written once, for every binary
# built from it).
kube_module() {
  [ -f "$WORK/go.mod" ] && [ -f "$WORK/tools.go" ] && grep -q cmd/kubelet "$WORK/tools.go" && return 0
  local kgomod gover
  kgomod=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -n "$kgomod" ] || { log "could not download k8s.io/kubernetes@$VERSION"; exit 1; }
  gover=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$kgomod" | head -1)
  {
    echo "module headrace.tools/kube"
    echo
    echo "go $gover"
    echo
    echo "require k8s.io/kubernetes $VERSION"
    echo
    # Every staging module: required at v0.0.0 or replaced to ./staging upstream.
    { grep -oE 'k8s\.io/[a-z0-9._/-]+ v0\.0\.0([^-0-9]|$)' "$kgomod" | awk '{print $1}'
      grep -oE 'k8s\.io/[a-z0-9._/-]+ => \./staging' "$kgomod" | awk '{print $1}'; } \
      | sort -u | while read -r m; do echo "replace $m => $m $STAGING"; done
  } > "$WORK/go.mod"
  cat > "$WORK/tools.go" <<GO
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
  log "resolving k8s.io/kubernetes $VERSION (staging $STAGING, go $gover)"
  (cd "$WORK" && go mod tidy -e >/dev/null 2>"$WORK/tidy.log" || true)
  (cd "$WORK" && GOFLAGS="$GOFLAGS -mod=mod" go mod download >/dev/null 2>&1 || true)
}
kube_build() {  # kube_build PACKAGE...: k8s.io/kubernetes commands into $BIN, versioned
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$VERSION -X k8s.io/component-base/version.gitMajor=1"
  ld="$ld -X k8s.io/component-base/version.gitMinor=$(echo "$VERSION" | cut -d. -f2)"
  ld="$ld -X k8s.io/client-go/pkg/version.gitVersion=$VERSION"
  kube_module
  (cd "$WORK" && go build -mod=mod -tags tools -trimpath -ldflags "$ld" -o "$BIN/" "$@") \
    || { log "go build of $* ($VERSION) failed ($(go version))"; exit 1; }
}

if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-scheduler" ] || [ ! -x "$BIN/kube-controller-manager" ]; then
  log "building kube-apiserver, kube-scheduler, kube-controller-manager"
  kube_build k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kube-controller-manager
fi
if [ ! -x "$BIN/kwok" ]; then
  log "building kwok $KWOK_VERSION"
  GOBIN=$BIN go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" \
    || { log "go install sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION failed ($(go version))"; exit 1; }
fi
# etcd: Debian's etcd-server (3.4; Kubernetes 1.36 runs on it without RequestWatchProgress),
# installed when root and apt-get allow; else built from the module proxy.
if [ ! -x "$BIN/etcd" ] && [ -z "${KUBE_ETCD_FROM_PROXY:-}" ]; then
  if ! [ -x /usr/bin/etcd ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing Debian's etcd-server"
    (apt-get install -y -qq etcd-server >/dev/null 2>&1 \
      || (apt-get update -qq && apt-get install -y -qq etcd-server >/dev/null)) || true
  fi
  [ -x /usr/bin/etcd ] && ln -sf /usr/bin/etcd "$BIN/etcd"
fi
if [ ! -x "$BIN/etcd" ]; then
  # `go install mod@version` refuses etcd's server module (its go.mod has replace directives):
  # a wrapper module requires it instead.
  log "building etcd $ETCD_VERSION"
  EWORK=$DEST/.etcd-work
  mkdir -p "$EWORK"
  printf 'module headrace.tools/etcd\n\ngo 1.25\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
    "$ETCD_VERSION" > "$EWORK/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' \
    > "$EWORK/tools.go"
  (cd "$EWORK" && go mod tidy -e >/dev/null 2>&1 || true
   go build -mod=mod -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3) \
    || { log "go build of go.etcd.io/etcd/server/v3@$ETCD_VERSION failed ($(go version))"; exit 1; }
fi
# A controller with webhooks: its binary, then its CRDs and webhook configurations (the latter
# last: they mark it complete). `go install mod@version` is refused for jobset (the proxy lists
# no versions of it), so a wrapper module requires each instead.
controller() {  # controller NAME MODULE VERSION PACKAGE
  local name=$1 mod=$2 ver=$3 pkg=$4 w=$DEST/.$1-work dir
  [ -f "$DEST/$name/webhooks.yaml" ] && [ -x "$BIN/$name" ] && return 0
  log "building $name $ver"
  mkdir -p "$w"
  printf 'module headrace.tools/%s\n\ngo 1.25\n\nrequire %s %s\n' "$name" "$mod" "$ver" > "$w/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" > "$w/tools.go"
  (cd "$w" && go mod tidy -e >/dev/null 2>&1 || true
   go build -mod=mod -trimpath -ldflags "-s -w" -o "$BIN/$name" "$pkg") \
    || { log "go build of $pkg ($mod@$ver) failed ($(go version))"; exit 1; }
  dir=$(cd "$w" && go mod download -json "$mod@$ver" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -rf "${DEST:?}/$name" && mkdir -p "$DEST/$name/crds"
  cp "$dir"/config/components/crd/bases/*.yaml "$DEST/$name/crds/"
  cp "$dir/config/components/webhook/manifests.yaml" "$DEST/$name/webhooks.yaml.part"
  chmod -R u+w "$DEST/$name"
  echo "$ver" > "$DEST/$name/version"
  mv "$DEST/$name/webhooks.yaml.part" "$DEST/$name/webhooks.yaml"
}
controller kueue sigs.k8s.io/kueue "$KUEUE_VERSION" sigs.k8s.io/kueue/cmd/kueue
controller jobset sigs.k8s.io/jobset "$JOBSET_VERSION" sigs.k8s.io/jobset
# kwok's pod stages that make pods Running and deletable (nodes keep kwok's defaults); pods then
# stay Running until a test sets their outcome (no automatic completion).
STAGES=$DEST/stages
if [ ! -f "$STAGES/pod-delete.yaml" ]; then
  KDIR=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  mkdir -p "$STAGES"
  cp "$KDIR/kustomize/stage/pod/fast/pod-ready.yaml" "$KDIR/kustomize/stage/pod/fast/pod-delete.yaml" \
     "$STAGES/"
  chmod u+w "$STAGES"/*.yaml
fi
echo "$VERSION" > "$DEST/.complete"

# The real node: the kubelet, Debian's runtime, and the two images it starts pods from.
PAUSE_TAG=3.10.2  # build/pause's own version at this release (its CHANGELOG)
BUSYBOX_TAG=1.35
IMAGES=$DEST/images
node_image() {  # node_image NAME TAG FILL [umoci config flags]: FILL ROOTFS fills the layer
  local name=$1 tag=$2 fill=$3 w=$DEST/.image-work/$1
  shift 3
  rm -rf "$w" "$IMAGES/$name.tar" && mkdir -p "$w" "$IMAGES"
  umoci init --layout "$w/oci" >/dev/null
  umoci new --image "$w/oci:$tag"
  umoci unpack --image "$w/oci:$tag" "$w/bundle" >/dev/null
  "$fill" "$w/bundle/rootfs"
  umoci repack --image "$w/oci:$tag" "$w/bundle" >/dev/null
  umoci config --image "$w/oci:$tag" --os linux --architecture "$(go env GOARCH)" "$@"
  skopeo copy -q "oci:$w/oci:$tag" "docker-archive:$IMAGES/$name.tar:localhost/headrace/$name:$tag"
  echo "$name.tar localhost/headrace/$name:$tag" >> "$IMAGES/index.part"
  rm -rf "$w"
}
fill_pause() {
  gcc -Os -Wall -Werror -static -s -DVERSION="v$PAUSE_TAG-headrace" -o "$1/pause" \
    "$KDIR/build/pause/linux/pause.c"
}
fill_busybox() {
  mkdir -p "$1/bin" "$1/tmp" && chmod 1777 "$1/tmp"
  cp "$BUSYBOX" "$1/bin/busybox"
  "$BUSYBOX" --list | while read -r applet; do
    [ "$applet" = busybox ] || ln -sf busybox "$1/bin/$applet"
  done
}
if [ "$TARGET" = node ] && [ ! -f "$DEST/.node-complete" ]; then
  NSTART=$(date +%s)
  if [ ! -x "$BIN/kubelet" ]; then
    log "building kubelet $VERSION"
    kube_build k8s.io/kubernetes/cmd/kubelet
    log "built kubelet in $(( $(date +%s) - NSTART )) s"
  fi
  DEBS="containerd runc containernetworking-plugins busybox-static umoci skopeo gcc libc6-dev"
  missing() {
    for t in containerd containerd-shim-runc-v2 ctr runc umoci skopeo gcc; do
      command -v "$t" >/dev/null || return 0
    done
    [ -x /bin/busybox ] && [ -x /usr/lib/cni/bridge ] || return 0
    return 1
  }
  if missing && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing Debian's $DEBS"
    (apt-get install -y -qq $DEBS >/dev/null 2>&1 \
      || (apt-get update -qq && apt-get install -y -qq $DEBS >/dev/null)) || true
  fi
  if missing; then
    log "the real node needs Debian's $DEBS (as root: apt-get install $DEBS)"; exit 1
  fi
  for t in containerd containerd-shim-runc-v2 ctr runc; do ln -sf "$(command -v "$t")" "$BIN/$t"; done
  ln -sfn /usr/lib/cni "$DEST/cni"
  BUSYBOX=/bin/busybox
  KDIR=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  rm -f "$IMAGES/index.part"
  node_image pause "$PAUSE_TAG" fill_pause --config.entrypoint /pause --config.user 65535:65535
  node_image busybox "$BUSYBOX_TAG" fill_busybox --config.cmd sh --config.env PATH=/bin
  mv "$IMAGES/index.part" "$IMAGES/index"
  rmdir "$DEST/.image-work"
  echo "$VERSION" > "$DEST/.node-complete"
  log "real node ready in $(( $(date +%s) - NSTART )) s"
fi
log "built in $(( $(date +%s) - START )) s"
echo "$BIN"
