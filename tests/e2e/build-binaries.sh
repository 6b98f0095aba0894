#!/usr/bin/env bash
# Builds the real control plane the end-to-end suite runs on (kube-apiserver, kube-scheduler,
# kubectl from the Kubernetes Go module; etcd from its Go module; helm from its Go module) and
# kubelet-harness (kubelet's device manager from the same Kubernetes module, driven by the tests:
# tests/e2e/kubelet-harness/main.go) into a cache outside the checkout, one folder per version, and
# does nothing for a binary that is already there (kubelet-harness: built from the same source).
#
#   tests/e2e/build-binaries.sh            # prints the folder that holds the binaries
#
# Environment:
#   DEVSHARE_E2E_CACHE   cache root (default: ~/.cache/devshare-e2e)
#   K8S_VERSION          Kubernetes release (default below); staging modules are pinned to v0.MINOR.PATCH
#   ETCD_VERSION, HELM_VERSION
#
# A cold build takes about 14-35 minutes on 2 cores (most of it kube-apiserver), kubelet-harness about
# 20 s more (it shares its packages with them; README); later runs take under a second. Needs only the
# Go toolchain and the Go module proxy.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.37.2}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v3.22.0}"
CACHE="${DEVSHARE_E2E_CACHE:-$HOME/.cache/devshare-e2e}"
OUT="$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION-helm-$HELM_VERSION"
BIN="$OUT/bin"
WANT=(kube-apiserver kube-scheduler kubectl etcd helm)
HARNESS_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/kubelet-harness/main.go"
# the harness is rebuilt when its source or the Kubernetes version changes
HARNESS_SUM="$( (cat "$HARNESS_SRC"; echo "$K8S_VERSION") | sha256sum | cut -c1-16)"

# helm built as its release is (HELM_STAMP below): a helm built without those flags assumes Kubernetes
# v1.20 for `helm template` and refuses a chart needing more
HELM_STAMP="$BIN/helm.release-ldflags"
harness_built() { [[ -x "$BIN/kubelet-harness" && "$(cat "$BIN/kubelet-harness.sum" 2>/dev/null)" == "$HARNESS_SUM" ]]; }
have_all() { for b in "${WANT[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done; [[ -f "$HELM_STAMP" ]] && harness_built; }
if have_all; then echo "$BIN"; exit 0; fi

command -v go >/dev/null || { echo "error: the e2e suite needs a Go toolchain (go) on PATH to build Kubernetes" >&2; exit 1; }
mkdir -p "$BIN"
WORK="$OUT/src"; mkdir -p "$WORK"
export CGO_ENABLED=0 GOFLAGS=-mod=mod
log() { echo "[build-binaries] $*" >&2; }

# --- Kubernetes: a module that requires k8s.io/kubernetes and pins every staging module ---------
k8s_gomod() {  # the go.mod of a module named $1 that builds from k8s.io/kubernetes
  local staging="v0.${K8S_VERSION#v1.}" gomod
  gomod="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",*/\1/p')"
  echo "module $1"
  echo
  echo "go $(sed -n 's/^go \([0-9.]*\).*/\1/p' "$gomod")"
  echo
  echo "require k8s.io/kubernetes $K8S_VERSION"
  echo
  # k8s.io/kubernetes requires each staging module at v0.0.0 and replaces it with ./staging/...;
  # a dependant has to pin them to the published release instead.
  for m in $(sed -n 's/^[[:space:]]*\(k8s\.io\/[a-z0-9-]*\) => \.\/staging.*/\1/p' "$gomod"); do
    echo "replace $m => $m $staging"
  done
}
k8s_ldflags() {
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  echo "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
}

if [[ ! -x "$BIN/kube-apiserver" || ! -x "$BIN/kube-scheduler" || ! -x "$BIN/kubectl" ]]; then
  log "building kube-apiserver, kube-scheduler, kubectl $K8S_VERSION (cold: ~25 min)"
  d="$WORK/k8s"; mkdir -p "$d"; cd "$d"
  k8s_gomod devshare.local/e2e-k8s > go.mod.new  # not into go.mod: the function runs go in this folder
  mv go.mod.new go.mod
  cat > tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
  go mod tidy -e >/dev/null 2>&1 || true
  go get "k8s.io/kubernetes@$K8S_VERSION" >&2
  ldflags="$(k8s_ldflags)"
  for c in kube-apiserver kube-scheduler kubectl; do
    [[ -x "$BIN/$c" ]] && continue
    log "go build $c"
    go build -trimpath -ldflags "$ldflags" -o "$BIN/$c.tmp" "k8s.io/kubernetes/cmd/$c" >&2
    mv "$BIN/$c.tmp" "$BIN/$c"
  done
fi

# --- etcd ----------------------------------------------------------------------------------------
if [[ ! -x "$BIN/etcd" ]]; then
  log "building etcd $ETCD_VERSION"
  d="$WORK/etcd"; mkdir -p "$d"; cd "$d"
  printf 'module devshare.local/e2e-etcd\n\ngo 1.24\n' > go.mod
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3 >&2
  mv "$BIN/etcd.tmp" "$BIN/etcd"
fi

# --- helm ----------------------------------------------------------------------------------------
if [[ ! -x "$BIN/helm" || ! -f "$HELM_STAMP" ]]; then
  log "building helm $HELM_VERSION"
  d="$WORK/helm"; mkdir -p "$d"; cd "$d"
  printf 'module devshare.local/e2e-helm\n\ngo 1.24\n' > go.mod
  go get "helm.sh/helm/v3@$HELM_VERSION" >&2
  # as helm's Makefile does: the Kubernetes version `helm template` assumes is 1.<client-go's minor>
  kminor="$(go list -f '{{.Version}}' -m k8s.io/client-go)"; kminor="${kminor#v0.}"; kminor="${kminor%%.*}"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags="$ldflags -X helm.sh/helm/v3/$pkg.k8sVersionMajor=1 -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$kminor"
  done
  go build -trimpath -ldflags "$ldflags" -o "$BIN/helm.tmp" helm.sh/helm/v3/cmd/helm >&2
  mv "$BIN/helm.tmp" "$BIN/helm"
  echo "$ldflags" > "$HELM_STAMP"
fi

# --- kubelet-harness: kubelet's device manager from the same Kubernetes module ---------------------
if ! harness_built; then
  log "building kubelet-harness (kubelet's device manager, $K8S_VERSION)"
  d="$WORK/kubelet-harness"; mkdir -p "$d"; cd "$d"
  rm -f go.mod
  k8s_gomod devshare.local/kubelet-harness > go.mod.new
  mv go.mod.new go.mod
  cp "$HARNESS_SRC" main.go
  go get "k8s.io/kubernetes@$K8S_VERSION" >&2
  go mod tidy >&2
  go build -trimpath -ldflags "$(k8s_ldflags)" -o "$BIN/kubelet-harness.tmp" . >&2
  mv "$BIN/kubelet-harness.tmp" "$BIN/kubelet-harness"
  echo "$HARNESS_SUM" > "$BIN/kubelet-harness.sum"
fi

have_all || { echo "error: the build finished but a binary is missing from $BIN" >&2; exit 1; }
echo "$BIN"
