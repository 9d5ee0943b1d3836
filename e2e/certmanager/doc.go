// Package certmanager runs cert-manager's own controllers and cainjector (v1.21.2, in-process)
// against a real kube-apiserver to prove the webhook's certificate chain from manifests/ works:
// issuance, CA injection, admission through the apiserver over that TLS, and rotation under load
// with zero failed admissions (integration build tag).
package certmanager
