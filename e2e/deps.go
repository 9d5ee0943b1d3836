//go:build tools

// Package e2e pins the libraries of the end-to-end module while its code lands, so parallel work
// never races on go.mod. Remove once every import below is used elsewhere.
package e2e

import (
	_ "github.com/cert-manager/cert-manager/pkg/controller"
	_ "github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	_ "github.com/container-storage-interface/spec/lib/go/csi"
	_ "github.com/google/go-containerregistry/pkg/registry"
	_ "github.com/google/go-containerregistry/pkg/v1/mutate"
	_ "github.com/pvrescue/pvrescue/internal/config"
	_ "google.golang.org/grpc"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/kustomize/api/krusty"
	_ "sigs.k8s.io/kustomize/kyaml/filesys"
)
