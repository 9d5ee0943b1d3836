package sidecar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// ErrProbeTimeout: statfs did not return in time, as on a FUSE mount whose daemon hangs.
var ErrProbeTimeout = errors.New("statfs timed out")

// DefaultProbeTimeout bounds the whole probe; kubelet's timeoutSeconds must be longer.
const DefaultProbeTimeout = 3 * time.Second

// ProbeOptions configures `probe --timeout D PATH...`.
type ProbeOptions struct {
	Timeout time.Duration
	Paths   []string
}

// NewProbeOptions returns the defaults.
func NewProbeOptions() *ProbeOptions { return &ProbeOptions{Timeout: DefaultProbeTimeout} }

// AddFlags registers the probe's flags.
func (o *ProbeOptions) AddFlags(fs *flag.FlagSet) {
	fs.DurationVar(&o.Timeout, flagName(contract.FlagTimeout), o.Timeout, "time allowed for statfs of all paths together")
}

// Validate checks the options.
func (o *ProbeOptions) Validate() error {
	var errs []error
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("%s must be positive, got %s", contract.FlagTimeout, o.Timeout))
	}
	if len(o.Paths) == 0 {
		errs = append(errs, errors.New("no path to probe: use probe [flags] PATH [PATH]"))
	}
	for _, p := range o.Paths {
		if p == "" || strings.HasPrefix(p, "-") {
			errs = append(errs, fmt.Errorf("bad path %q (flags go before the paths)", p))
		}
	}
	return errors.Join(errs...)
}

// ProbeResult is the outcome for one path; Err is nil when the mount answered.
type ProbeResult struct {
	Path    string
	Err     error
	Elapsed time.Duration
}

// Probe calls statfs on every path concurrently and waits at most timeout in total. A path whose
// statfs has not returned by then gets ErrProbeTimeout; its goroutine is abandoned (a syscall on
// a hung FUSE mount cannot be cancelled). With the in-process Statfser the abandoned call can
// keep the process from exiting (see ChildStatfs); the helper uses ChildStatfs. Results keep the
// order of paths.
func Probe(ctx context.Context, m Statfser, paths []string, timeout time.Duration) []ProbeResult {
	type done struct {
		i   int
		err error
		at  time.Duration
	}
	start := time.Now()
	ch := make(chan done, len(paths)) // buffered: abandoned goroutines never block on send
	for i, p := range paths {
		go func() {
			err := m.Statfs(p)
			ch <- done{i, err, time.Since(start)}
		}()
	}
	results := make([]ProbeResult, len(paths))
	got := make([]bool, len(paths))
	timer := time.NewTimer(timeout)
	defer timer.Stop()
wait:
	for range paths {
		select {
		case d := <-ch:
			results[d.i] = ProbeResult{Path: paths[d.i], Err: d.err, Elapsed: d.at}
			got[d.i] = true
		case <-timer.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	for i, p := range paths {
		if !got[i] {
			results[i] = ProbeResult{Path: p, Err: fmt.Errorf("%w after %s (hung mount: not a failure, a restart cannot help)", ErrProbeTimeout, timeout), Elapsed: time.Since(start)}
		}
	}
	return results
}

// Healthy reports whether the probe passes: no path failed with an error. A timeout (a hung
// mount: its FUSE daemon holds the connection but does not answer) does not fail it — a
// restarted container would get the same mount, and kubelet cannot even start one while the
// host path hangs; the node agent reports the hang (MountHung) and, when configured, aborts it,
// after which the mount is dead (ENOTCONN) and the probe fails until the agent restored it.
func Healthy(rs []ProbeResult) bool {
	for _, r := range rs {
		if r.Err != nil && !errors.Is(r.Err, ErrProbeTimeout) {
			return false
		}
	}
	return true
}

// FormatProbe renders one line per path, e.g.
// "/mnt/data: transport endpoint is not connected (ENOTCONN)"; kubelet puts it in the event.
func FormatProbe(rs []ProbeResult) string {
	var b strings.Builder
	for _, r := range rs {
		if r.Err == nil {
			fmt.Fprintf(&b, "%s: ok\n", r.Path)
			continue
		}
		fmt.Fprintf(&b, "%s: %s\n", r.Path, DescribeError(r.Err))
	}
	return b.String()
}

// DescribeError adds the errno's symbolic name to an error ("... (ENOTCONN)"), which is what
// people search for.
func DescribeError(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := errnoName(errno); name != "" {
			return fmt.Sprintf("%s (%s)", err, name)
		}
	}
	return err.Error()
}

// RunProbe runs the probe and prints the result; 1 when a mount failed (dead, gone), 0
// otherwise — a hung mount included (see Healthy).
func RunProbe(ctx context.Context, o *ProbeOptions, env *Env) int {
	mounts := env.Deps.ProbeMounts
	if mounts == nil {
		mounts = env.Deps.Mounts
	}
	rs := Probe(ctx, mounts, o.Paths, o.Timeout)
	say(env.Stdout, "%s", FormatProbe(rs))
	if Healthy(rs) {
		return 0
	}
	return 1
}
