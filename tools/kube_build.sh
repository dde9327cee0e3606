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
#   tools/kube_build.sh                          build (if needed) and print the bin folder
#   KUBE_VERSION=v1.35.4 tools/kube_build.sh     another release (its v0.x.y staging modules must be served)
#   KUBE_CHECK_ONLY=1 tools/kube_build.sh        print the folder only if already built
set -euo pipefail
VERSION=${KUBE_VERSION:-v1.36.3}
KWOK_VERSION=${KWOK_VERSION:-v0.7.0}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KUEUE_VERSION=${KUEUE_VERSION:-v0.17.0}
JOBSET_VERSION=${JOBSET_VERSION:-v0.11.1}
ROOT=${HEADRACE_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/headrace/kube}
DEST=$ROOT/$VERSION
BIN=$DEST/bin
if [ -f "$DEST/.complete" ] && [ -f "$DEST/kueue/webhooks.yaml" ] && [ -f "$DEST/jobset/webhooks.yaml" ]; then
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

if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-scheduler" ] || [ ! -x "$BIN/kube-controller-manager" ]; then
  KGOMOD=$(cd "$WORK" && go mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -n "$KGOMOD" ] || { log "could not download k8s.io/kubernetes@$VERSION"; exit 1; }
  GOVER=$(sed -n 's/^go \([0-9.]*\).*/\1/p' "$KGOMOD" | head -1)
  {
    echo "module headrace.tools/kube"
    echo
    echo "go $GOVER"
    echo
    echo "require k8s.io/kubernetes $VERSION"
    echo
    # Every staging module: required at v0.0.0 or replaced to ./staging upstream.
    { grep -oE 'k8s\.io/[a-z0-9._/-]+ v0\.0\.0([^-0-9]|$)' "$KGOMOD" | awk '{print $1}'
      grep -oE 'k8s\.io/[a-z0-9._/-]+ => \./staging' "$KGOMOD" | awk '{print $1}'; } \
      | sort -u | while read -r m; do echo "replace $m => $m $STAGING"; done
  } > "$WORK/go.mod"
  cat > "$WORK/tools.go" <<GO
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
GO
  log "resolving k8s.io/kubernetes $VERSION (staging $STAGING, go $GOVER)"
  (cd "$WORK" && go mod tidy -e >/dev/null 2>"$WORK/tidy.log" || true)
  (cd "$WORK" && GOFLAGS="$GOFLAGS -mod=mod" go mod download >/dev/null 2>&1 || true)
  LD="-s -w -X k8s.io/component-base/version.gitVersion=$VERSION -X k8s.io/component-base/version.gitMajor=1"
  LD="$LD -X k8s.io/component-base/version.gitMinor=$(echo "$VERSION" | cut -d. -f2)"
  LD="$LD -X k8s.io/client-go/pkg/version.gitVersion=$VERSION"
  log "building kube-apiserver, kube-scheduler, kube-controller-manager"
  (cd "$WORK" && go build -mod=mod -tags tools -trimpath -ldflags "$LD" -o "$BIN/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-scheduler \
      k8s.io/kubernetes/cmd/kube-controller-manager) \
    || { log "go build of Kubernetes $VERSION failed ($(go version))"; exit 1; }
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
log "built in $(( $(date +%s) - START )) s"
echo "$BIN"
