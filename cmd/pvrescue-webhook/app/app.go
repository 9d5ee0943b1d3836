// Package app is the pvrescue-webhook command line: flags, validation and the serve wiring.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/internal/cmdutil/kubecmd"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/webhook"
	"github.com/pvrescue/pvrescue/webhook/server"
)

// NamespaceEnv is set from the downward API (metadata.namespace).
const NamespaceEnv = "POD_NAMESPACE"

// Options are the flags of `serve`.
type Options struct {
	ConfigFile             string
	CertDir                string
	Port                   int
	MetricsBindAddress     string
	HealthProbeBindAddress string
	Namespace              string
	Kubeconfig             string
}

// NewOptions returns the defaults; the namespace comes from $POD_NAMESPACE, else pvrescue-system.
func NewOptions() *Options {
	ns := os.Getenv(NamespaceEnv)
	if ns == "" {
		ns = webhook.DefaultNamespace
	}
	return &Options{
		CertDir:                "/tmp/k8s-webhook-server/serving-certs",
		Port:                   9443,
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		Namespace:              ns,
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "path of the pvrescue configuration file (defaults when empty)")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "directory holding tls.crt and tls.key (reloaded on change)")
	fs.IntVar(&o.Port, "port", o.Port, "HTTPS port of the webhook")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "address of /metrics (\"0\" disables)")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "address of /healthz and /readyz (\"0\" disables)")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "the webhook's own namespace, never mutated (taken from $"+NamespaceEnv+" when set)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file (default: $KUBECONFIG or in-cluster configuration)")
}

// ErrInvalidOptions is wrapped by every flag validation error.
var ErrInvalidOptions = errors.New("invalid options")

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...)))
	}
	if o.CertDir == "" {
		bad("--cert-dir must not be empty")
	}
	if o.Port < 1 || o.Port > 65535 {
		bad("--port must be in 1..65535, got %d", o.Port)
	}
	if o.MetricsBindAddress == "" {
		bad("--metrics-bind-address must not be empty (\"0\" disables)")
	}
	if o.HealthProbeBindAddress == "" {
		bad("--health-probe-bind-address must not be empty (\"0\" disables)")
	}
	if o.Namespace == "" {
		bad("--namespace must not be empty")
	}
	return errors.Join(errs...)
}

// ServeFunc runs the webhook with validated options (tests pass a recorder instead of Serve).
type ServeFunc func(ctx context.Context, o *Options) error

// NewRootCommand builds `pvrescue-webhook` with its `serve` subcommand. Further subcommands are
// added with AddCommand on the result.
func NewRootCommand(serve ServeFunc) *cobra.Command {
	root := &cobra.Command{
		Use:           "pvrescue-webhook",
		Short:         "Mutating admission webhook that prepares pods for pvrescue",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(NewServeCommand(serve))
	// For clusters without cert-manager: issue the CA and serving certificate ourselves.
	root.AddCommand(NewCertsCommand(defaultClient))
	return root
}

// defaultClient builds a clientset from the one client configuration of pvrescue's binaries.
func defaultClient() (kubernetes.Interface, error) {
	rc, err := kubecmd.RESTConfig("")
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(rc)
}

// NewServeCommand builds `serve`.
func NewServeCommand(serve ServeFunc) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the admission webhook over TLS",
		Args:  cobra.NoArgs,
		RunE:  kubecmd.RunE(o, serve),
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

// Serve loads the configuration and runs the webhook server until ctx ends.
func Serve(ctx context.Context, o *Options) error {
	cfg, err := config.Load(o.ConfigFile)
	if err != nil {
		return err
	}
	restCfg, err := kubecmd.RESTConfig(o.Kubeconfig)
	if err != nil {
		return err
	}
	mgr, err := server.NewManager(restCfg, server.Options{
		Config:                 cfg,
		Namespace:              o.Namespace,
		CertDir:                o.CertDir,
		Port:                   o.Port,
		MetricsBindAddress:     o.MetricsBindAddress,
		HealthProbeBindAddress: o.HealthProbeBindAddress,
	})
	if err != nil {
		return err
	}
	logr.FromContextOrDiscard(ctx).Info("serving", "port", o.Port, "certDir", o.CertDir, "namespace", o.Namespace, "path", webhook.Path)
	return mgr.Start(ctx)
}
