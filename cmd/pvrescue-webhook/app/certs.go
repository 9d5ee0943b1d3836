package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/certs"
	"github.com/pvrescue/pvrescue/internal/cmdutil/kubecmd"
)

// NewCertsCommand returns `certs` with its `bootstrap` subcommand. newClient is called only when
// the command runs, so flag parsing can be tested without a cluster.
func NewCertsCommand(newClient func() (kubernetes.Interface, error)) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "certs",
		Short: "Manage the webhook's TLS certificates without cert-manager",
	}
	cmd.AddCommand(NewBootstrapCommand(func(ctx context.Context, o *certs.Options) error {
		c, err := newClient()
		if err != nil {
			return fmt.Errorf("kubernetes client: %w", err)
		}
		return certs.NewBootstrapper(c).Run(ctx, o)
	}))
	return cmd
}

// NewBootstrapCommand builds `certs bootstrap`, calling run with the validated options.
func NewBootstrapCommand(run func(ctx context.Context, o *certs.Options) error) *cobra.Command {
	o := certs.NewOptions()
	cmd := &cobra.Command{
		Use:   "bootstrap",
		Short: "Create or renew a CA and the webhook serving certificate in Secrets and patch the caBundle",
		Long: `bootstrap is for clusters without cert-manager. It keeps a CA in --ca-secret and a serving
certificate for <service>.<namespace>.svc in --secret, renews the serving certificate once it expires
within --renew-before, and sets caBundle on every webhook of --webhook-config. It is idempotent: a run
that finds everything valid writes nothing. Do not use it together with cert-manager's cainjector.`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          kubecmd.RunE(o, run),
	}
	o.AddFlags(cmd.Flags())
	return cmd
}
