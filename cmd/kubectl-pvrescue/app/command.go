// Package app is `kubectl pvrescue`: what pvrescue is doing in a cluster, read from the
// objects its components write (PV annotations, the Node condition, Events, the webhook's pod
// annotation). It changes nothing.
package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Options of every subcommand.
type Options struct {
	ConfigFlags *genericclioptions.ConfigFlags
	IO          genericiooptions.IOStreams
	Clock       clock.PassiveClock
	// Output is "", "wide", "json" or "yaml".
	Output string
	// InstallNamespace holds pvrescue's ConfigMap; WebhookConfig is its MutatingWebhookConfiguration.
	InstallNamespace string
	WebhookConfig    string
}

// NewOptions returns the defaults (manifests/ and the chart install into pvrescue-system).
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{
		ConfigFlags:      genericclioptions.NewConfigFlags(true),
		IO:               streams,
		Clock:            clock.RealClock{},
		InstallNamespace: "pvrescue-system",
		WebhookConfig:    "pvrescue-webhook",
	}
}

// ErrBadOutput is returned for an unknown -o value.
var ErrBadOutput = errors.New("unknown output format")

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	switch o.Output {
	case OutputTable, OutputWide, OutputJSON, OutputYAML:
	default:
		errs = append(errs, fmt.Errorf("%w %q: use wide, json or yaml", ErrBadOutput, o.Output))
	}
	if o.InstallNamespace == "" {
		errs = append(errs, errors.New("--pvrescue-namespace must not be empty"))
	}
	if o.WebhookConfig == "" {
		errs = append(errs, errors.New("--webhook-config must not be empty"))
	}
	return errors.Join(errs...)
}

// gather reads the cluster through the kubeconfig's client; namespace limits pods as in Gather.
func (o *Options) gather(ctx context.Context, namespace string) (*Snapshot, error) {
	cfg, err := o.ConfigFlags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return Gather(ctx, c, o.InstallNamespace, o.WebhookConfig, namespace)
}

// NewCommand builds `kubectl-pvrescue` with its subcommands.
func NewCommand(o *Options) *cobra.Command {
	root := &cobra.Command{
		Use:           "kubectl-pvrescue",
		Short:         "Show what pvrescue does in the cluster: fake devices, missing disks, restored mounts, unprotected pods",
		SilenceUsage:  true,
		SilenceErrors: true,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl pvrescue"},
	}
	o.ConfigFlags.AddFlags(root.PersistentFlags())
	root.PersistentFlags().StringVar(&o.InstallNamespace, "pvrescue-namespace", o.InstallNamespace, "namespace pvrescue is installed in (its ConfigMap)")
	root.PersistentFlags().StringVar(&o.WebhookConfig, "webhook-config", o.WebhookConfig, "name of pvrescue's MutatingWebhookConfiguration")

	status := &cobra.Command{
		Use:   "status",
		Short: "Per node: fake devices, missing disks, restored mounts; and pods admitted without the webhook",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.runStatus(cmd.Context())
		},
	}
	explain := &cobra.Command{
		Use:   "explain pod NAME",
		Short: "What the webhook injected or skipped for a pod, and what the agent did for its volumes",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 2 || (args[0] != "pod" && args[0] != "pods" && args[0] != "po") {
				return fmt.Errorf("usage: kubectl pvrescue explain pod NAME")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return o.runExplain(cmd.Context(), args[1])
		},
	}
	for _, c := range []*cobra.Command{status, explain} {
		c.Flags().StringVarP(&o.Output, "output", "o", o.Output, "output format: wide, json or yaml (default: table)")
		root.AddCommand(c)
	}
	return root
}

func (o *Options) runStatus(ctx context.Context) error {
	s, err := o.gather(ctx, "")
	if err != nil {
		return err
	}
	return PrintStatus(o.IO.Out, o.Output, o.Clock.Now(), BuildStatus(ctx, s))
}

func (o *Options) runExplain(ctx context.Context, name string) error {
	ns, _, err := o.ConfigFlags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	s, err := o.gather(ctx, ns)
	if err != nil {
		return err
	}
	e, err := Explain(ctx, s, ns, name)
	if err != nil {
		return err
	}
	return PrintExplanation(o.IO.Out, o.Output, o.Clock.Now(), e)
}
