// Package app is the pvrescue-agent command: flags, validation and wiring of the runnables.
package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/cmdutil/kubecmd"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/fusewatch"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

// NodeNameEnv is set by the DaemonSet from the downward API (spec.nodeName).
const NodeNameEnv = "NODE_NAME"

// Options are the agent's command-line flags.
type Options struct {
	ConfigFile             string
	NodeName               string
	Kubeconfig             string
	MetricsBindAddress     string
	HealthProbeBindAddress string
	// ContainerRemount puts restored S3 mounts back into running containers (needs hostPID).
	ContainerRemount bool
}

// NewOptions returns the defaults; the node name comes from $NODE_NAME.
func NewOptions() *Options {
	return &Options{
		NodeName:               os.Getenv(NodeNameEnv),
		MetricsBindAddress:     ":8080",
		HealthProbeBindAddress: ":8081",
		ContainerRemount:       true,
	}
}

// AddFlags registers the flags on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "path of the pvrescue configuration file (defaults when empty)")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "name of this node (default $"+NodeNameEnv+", from the downward API)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else the in-cluster configuration)")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", o.MetricsBindAddress, "address of /metrics (\"0\" disables)")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "address of /healthz (\"0\" disables)")
	fs.BoolVar(&o.ContainerRemount, "container-remount", o.ContainerRemount, "put restored S3 mounts back into running containers (needs hostPID: true on the agent pod; false turns it off)")
}

// ErrInvalidOptions is wrapped by every flag validation error.
var ErrInvalidOptions = errors.New("invalid options")

// Validate checks the flags.
func (o *Options) Validate() error {
	var errs []error
	if o.NodeName == "" {
		errs = append(errs, fmt.Errorf("%w: --node-name or $%s is required", ErrInvalidOptions, NodeNameEnv))
	}
	if o.MetricsBindAddress == "" {
		errs = append(errs, fmt.Errorf("%w: --metrics-bind-address must not be empty (\"0\" disables)", ErrInvalidOptions))
	}
	if o.HealthProbeBindAddress == "" {
		errs = append(errs, fmt.Errorf("%w: --health-probe-bind-address must not be empty (\"0\" disables)", ErrInvalidOptions))
	}
	return errors.Join(errs...)
}

// RunFunc runs the agent with validated options.
type RunFunc func(ctx context.Context, o *Options) error

// NewCommand builds the command; run is called with the parsed, validated options (tests pass
// a recorder instead of Run).
func NewCommand(run RunFunc) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:           "pvrescue-agent",
		Short:         "Per-node agent keeping pods running when their volumes break",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          kubecmd.RunE(o, run),
	}
	o.AddFlags(cmd.Flags())
	return cmd
}

func restConfig(kubeconfig string) (*rest.Config, error) { return kubecmd.RESTConfig(kubeconfig) }

// Run builds the shared dependencies and runs the agent until ctx is done.
func Run(ctx context.Context, o *Options) error {
	log := logr.FromContextOrDiscard(ctx).WithName("pvrescue-agent")
	ctx = logr.NewContext(ctx, log)
	cfg, err := config.Load(o.ConfigFile)
	if err != nil {
		return err
	}
	rc, err := restConfig(o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubernetes client config: %w", err)
	}
	// kubelet's client defaults (kubeAPIQPS 50, burst 100): the view reads each volume of the
	// node by name, and client-go's 5 QPS made the first pass over 700 volumes take minutes.
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Every request of the agent's client tells whether the API server answers; the agent keeps
	// running without it (see nodeagent.APIContact).
	var contactOS nodeagent.KubeContactOS
	contact := nodeagent.NewAPIContact(clock.RealClock{}, &contactOS, reg, nodeagent.APIContactOptions{})
	rc.Wrap(contact.WrapTransport)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	contactOS = nodeagent.KubeContactOS{NodeName: o.NodeName, Nodes: client.CoreV1().Nodes(), Prober: func(ctx context.Context) error {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/version").DoRaw(ctx)
		return err
	}}
	recorder, stopEvents := nodeagent.NewRecorder(client, o.NodeName, nodeagent.RecorderOptions{})
	defer stopEvents()
	// Consent: by default the rescues see only the pods of opted-in namespaces that did not opt out.
	view, err := nodeagent.NewKubeView(client, o.NodeName, clock.RealClock{}, nodeagent.ViewOptions{RequireConsent: !cfg.RescueAllNamespaces})
	if err != nil {
		return err
	}
	// The informers start now and the rescues wait for them (AfterSync), but /healthz and
	// /metrics are served at once: with the API server away at start the agent must not be
	// restarted by its liveness probe, which would kill the bridges it adopts.
	view.StartInformers(ctx)
	defer view.Shutdown()
	// A FUSE daemon's exit wakes the S3 rescue at once (pidfds; see fusewatch); its periodic
	// check is the safety net.
	fuse, err := fusewatch.New(fusewatch.NewOS(fusewatch.OSOptions{}), fusewatch.Options{Registerer: reg})
	if err != nil {
		return err
	}
	deps := nodeagent.Deps{NodeName: o.NodeName, Config: cfg, Client: client, View: view, Recorder: recorder,
		Registerer: reg, Clock: clock.RealClock{}, FUSEExits: fuse.Wake(),
		APIReturned: contact.Returned()}
	// Whether dead mounts are replaced in place or stacked (Linux < 6.5) is said once, here.
	// Kubelet's paths are replaced too only with the container remounter on: a HostToContainer
	// container sees a stacked mount by propagation, but not one put beneath.
	replace := mountreplace.NodeSupport()
	log.Info("mount replacement probed", "beneath", replace.Beneath, "result", replace.String(),
		"kubeletPathsBeneath", replace.Beneath && o.ContainerRemount)
	if o.ContainerRemount {
		cmOS, err := containermount.NewOS("/proc", replace)
		if err != nil {
			return err
		}
		rm, err := containermount.New(deps, cmOS, containermount.NewOptions())
		if err != nil {
			return err
		}
		deps.Remounter = rm
	}

	agent := nodeagent.New(nodeagent.Options{MetricsAddr: o.MetricsBindAddress, HealthAddr: o.HealthProbeBindAddress}, reg)
	ld, err := localdisk.New(deps, localdisk.NewRealOS(cfg.StateDir), localdisk.NewOptions())
	if err != nil {
		return err
	}
	agent.Add("apiserver-contact", contact)
	agent.Add("fusewatch", fuse)
	agent.Add("localdisk", nodeagent.AfterSync(view, ld))
	s3opts := s3mount.NewOptions()
	s3, err := s3mount.New(deps, s3mount.NewOS(), s3opts)
	if err != nil {
		return err
	}
	agent.Add("s3mount", nodeagent.AfterSync(view, s3))
	// Bridges nearing s3.bridgeLimits are reported (metric, Event on the Node).
	limits, err := s3fs.NewLimitWatcher(s3fs.NewCgroups(), s3opts.BridgeCgroup, cfg, recorder, o.NodeName, clock.RealClock{}, 10*time.Second, reg)
	if err != nil {
		return err
	}
	agent.Add("bridge-limits", limits)
	log.Info("starting", "node", o.NodeName, "config", o.ConfigFile, "containerRemount", o.ContainerRemount,
		"rescueAllNamespaces", cfg.RescueAllNamespaces)
	return agent.Run(ctx)
}
