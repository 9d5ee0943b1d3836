#!/usr/bin/env bash
# Builds the real Kubernetes control-plane and node binaries from the Go module proxy.
#
# k8s.io/kubernetes cannot be `go install`ed directly: its go.mod replaces the staging
# modules (k8s.io/api, …) with local paths. A throwaway module that requires it and
# replaces every staging module with its published version builds fine.
#
# Usage: hack/build-kube-binaries.sh OUT_DIR [binary ...]
#   binaries default to: kube-apiserver
# Binaries already present in OUT_DIR are kept (the directory is keyed by version).
set -euo pipefail

KUBE_VERSION="${KUBE_VERSION:-v1.37.2}"
out="${1:?usage: $0 OUT_DIR [binary ...]}"
shift
bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(kube-apiserver)

mkdir -p "$out"
out="$(cd "$out" && pwd)"

missing=()
for b in "${bins[@]}"; do
  [ -x "$out/$b" ] || missing+=("$b")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

staging_version="v0${KUBE_VERSION#v1}"   # v1.37.2 -> v0.37.2
minor="$(echo "$KUBE_VERSION" | cut -d. -f2)"
staging=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go cloud-provider
  cluster-bootstrap code-generator component-base component-helpers controller-manager cri-api
  cri-client cri-streaming csi-translation-lib dynamic-resource-allocation endpointslice externaljwt
  kms kube-aggregator kube-controller-manager kube-proxy kube-scheduler kubectl kubelet metrics
  mount-utils pod-security-admission sample-apiserver sample-cli-plugin sample-controller streaming)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
{
  echo "module pvrescue.local/kubebuild"
  echo
  echo "go 1.26"
  echo
  echo "require k8s.io/kubernetes $KUBE_VERSION"
  echo
  for m in "${staging[@]}"; do
    echo "replace k8s.io/$m => k8s.io/$m $staging_version"
  done
} > go.mod
cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
echo ">> resolving k8s.io/kubernetes $KUBE_VERSION modules" >&2
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
GOFLAGS=-mod=mod go get "k8s.io/kubernetes@$KUBE_VERSION" >&2

ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$KUBE_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"
# One build for every missing binary: they share most packages, and their links run beside the
# compiles instead of one after another (each link is mostly single-threaded).
pkgs=()
for b in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
echo ">> building ${missing[*]} $KUBE_VERSION into $out (cold: several minutes on 2 cores)" >&2
mkdir -p "$work/out"
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$work/out/" "${pkgs[@]}"
for b in "${missing[@]}"; do
  mv "$work/out/$b" "$out/$b.tmp" && mv "$out/$b.tmp" "$out/$b"
done
