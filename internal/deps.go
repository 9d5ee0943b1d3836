//go:build tools

// Package internal pins the libraries pvrescue is built on while the code that uses them lands,
// so parallel work never races on go.mod. Remove once every import below is used elsewhere.
package internal

import (
	_ "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/google/go-cmp/cmp"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/pflag"
	_ "go.uber.org/zap"
	_ "golang.org/x/sys/unix"
	_ "k8s.io/api/core/v1"
	_ "k8s.io/client-go/kubernetes"
	_ "k8s.io/client-go/tools/record"
	_ "k8s.io/mount-utils"
	_ "sigs.k8s.io/controller-runtime/pkg/certwatcher"
	_ "sigs.k8s.io/controller-runtime/pkg/envtest"
	_ "sigs.k8s.io/controller-runtime/pkg/log/zap"
	_ "sigs.k8s.io/controller-runtime/pkg/metrics"
	_ "sigs.k8s.io/controller-runtime/pkg/webhook/admission"
	_ "sigs.k8s.io/yaml"
)
