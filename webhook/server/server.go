// Package server runs pvrescue's admission webhook: a controller-runtime manager with the TLS
// webhook server, informers for PVCs, StorageClasses and PVs, health endpoints and metrics. It is kept
// apart from package webhook so the admission logic (and its fuzz build) stays free of the manager.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	crwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/webhook"
)

// Options configure the webhook server.
type Options struct {
	Config *config.Config
	// Namespace is the webhook's own namespace (never mutated).
	Namespace string
	// CertDir holds tls.crt and tls.key; they are reloaded when they change (certwatcher).
	CertDir string
	// Host to listen on ("" = all addresses) and Port of the HTTPS server.
	Host string
	Port int
	// MetricsBindAddress and HealthProbeBindAddress ("0" disables either).
	MetricsBindAddress     string
	HealthProbeBindAddress string
	// Registerer for the admission metrics; default controller-runtime's metrics.Registry.
	Registerer prometheus.Registerer
}

// NewManager assembles the webhook server: a controller-runtime manager whose cache holds PVCs,
// StorageClasses and PVs, the TLS webhook server at webhook.Path, /healthz, /readyz and /metrics.
// The options are the command's, validated there (cmd/pvrescue-webhook/app).
func NewManager(restCfg *rest.Config, o Options) (manager.Manager, error) {
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := storagev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	whServer := crwebhook.NewServer(crwebhook.Options{
		Host:    o.Host,
		Port:    o.Port,
		CertDir: o.CertDir,
		TLSOpts: []func(*tls.Config){func(c *tls.Config) {
			c.MinVersion = tls.VersionTLS12
			// HTTP/2 off: its rapid-reset and stream-exhaustion issues are not worth it for one endpoint.
			c.NextProtos = []string{"http/1.1"}
		}},
	})
	mgr, err := manager.New(restCfg, manager.Options{
		Scheme:                 scheme,
		WebhookServer:          whServer,
		Metrics:                metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress: o.HealthProbeBindAddress,
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	// Start the informers with the manager rather than lazily on the first admission; the
	// admissions read their stores.
	stores, err := webhook.StoresOf(context.Background(), mgr.GetCache())
	if err != nil {
		return nil, err
	}

	reg := o.Registerer
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	metrics, err := webhook.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	m := &webhook.Defaulter{
		Config:     o.Config,
		Namespace:  o.Namespace,
		Classifier: &webhook.Classifier{Config: o.Config, Lookup: webhook.ReaderLookup{Cache: mgr.GetCache(), Live: mgr.GetAPIReader(), Stores: stores}},
	}
	// GetWebhookServer (not whServer directly) is what adds the server to the manager's runnables.
	mgr.GetWebhookServer().Register(webhook.Path, webhook.NewWebhook(m, metrics))

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("informers", func(*http.Request) error {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return errors.New("PVC, StorageClass and PV informers not synced")
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}
