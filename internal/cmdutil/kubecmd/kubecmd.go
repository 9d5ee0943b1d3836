// Package kubecmd runs the cobra commands of pvrescue's Kubernetes-facing binaries (webhook,
// agent) the same way: logger flags on every command, the logger in the context (and in
// controller-runtime), errors logged once, an exit code; and one way to build the client
// configuration.
package kubecmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// ErrInvalidLogLevel is wrapped by the error of a --zap-log-level that is not a level.
var ErrInvalidLogLevel = errors.New("invalid log level")

// LogOptions are the logger flags.
type LogOptions struct {
	// Level is --zap-log-level: debug, info, warn, error, or an integer N > 0 that turns on the
	// V(N) logs and everything less verbose (debug is V(1)).
	Level string
	// Development switches to zap's human-readable console encoder.
	Development bool
}

// NewLogOptions returns the defaults: info level, JSON lines.
func NewLogOptions() *LogOptions { return &LogOptions{Level: "info"} }

// AddFlags registers the flags on fs.
func (o *LogOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Level, "zap-log-level", o.Level, "log level: debug, info, warn, error, or an integer N > 0 that enables V(N) logs (debug = 1)")
	fs.BoolVar(&o.Development, "zap-devel", o.Development, "human-readable console logs instead of JSON")
}

// ParseLevel turns a --zap-log-level value into a zap level (V(N) is zap level -N).
func ParseLevel(s string) (zapcore.Level, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n < 1 || n > 127 {
			return 0, fmt.Errorf("%w %q: a verbosity must be 1..127", ErrInvalidLogLevel, s)
		}
		return zapcore.Level(-n), nil
	}
	l, err := zapcore.ParseLevel(strings.ToLower(s))
	if err != nil || s == "" {
		return 0, fmt.Errorf("%w %q: want debug, info, warn, error or a verbosity", ErrInvalidLogLevel, s)
	}
	return l, nil
}

// Build makes the logger; sync flushes it.
func (o *LogOptions) Build() (log logr.Logger, sync func(), err error) {
	level, err := ParseLevel(o.Level)
	if err != nil {
		return logr.Discard(), func() {}, err
	}
	cfg := zap.NewProductionConfig()
	if o.Development {
		cfg = zap.NewDevelopmentConfig()
	}
	cfg.Level = zap.NewAtomicLevelAt(level)
	zl, err := cfg.Build()
	if err != nil {
		return logr.Discard(), func() {}, fmt.Errorf("logger: %w", err)
	}
	return zapr.NewLogger(zl), func() { _ = zl.Sync() }, nil
}

// Execute runs cmd with ctx: the log flags are added to cmd's persistent flags, the logger built
// from them is put into the context of the command that runs (and set as controller-runtime's),
// an error is logged once, and the exit code is returned (0, or 1 on error).
func Execute(ctx context.Context, cmd *cobra.Command) int {
	lo := NewLogOptions()
	lo.AddFlags(cmd.PersistentFlags())
	log, sync := logr.Discard(), func() {}
	logged := false
	prev := cmd.PersistentPreRunE
	cmd.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		l, s, err := lo.Build()
		if err != nil {
			return err
		}
		log, sync, logged = l, s, true
		ctrllog.SetLogger(log)
		c.SetContext(logr.NewContext(c.Context(), log))
		if prev != nil {
			return prev(c, args)
		}
		return nil
	}
	err := cmd.ExecuteContext(ctx)
	defer sync()
	if err == nil {
		return 0
	}
	if logged {
		log.Error(err, cmd.Name()+" failed")
	} else {
		fmt.Fprintf(os.Stderr, "%s: %v\n", cmd.Name(), err)
	}
	return 1
}

// RESTConfig is the one way pvrescue's binaries configure their Kubernetes client: the
// kubeconfig file when given, else $KUBECONFIG or ~/.kube/config when present, else the
// in-cluster configuration of the pod.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	c, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		if kubeconfig != "" {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	return c, nil
}

// Validator is an options struct that checks itself.
type Validator interface{ Validate() error }

// RunE is the RunE of a command with options o: it validates o and calls run with the command's
// context. Commands are built with a run function so their flag parsing is table-tested without
// starting anything.
func RunE[O Validator](o O, run func(context.Context, O) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := o.Validate(); err != nil {
			return err
		}
		return run(cmd.Context(), o)
	}
}
