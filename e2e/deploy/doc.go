// Package deploy tests that manifests/ renders with kustomize and that every object it produces is
// accepted by a real kube-apiserver carrying cert-manager's CRDs (integration build tag).
package deploy
