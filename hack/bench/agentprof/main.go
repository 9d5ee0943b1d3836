// Command agentprof is pvrescue-agent with a CPU profile, for `make bench` only: the agent's own
// command (app.NewCommand(app.Run)), plus a CPU profile written to $PVRESCUE_BENCH_CPUPROFILE
// from $PVRESCUE_BENCH_CPUPROFILE_AFTER (a Go duration, default 0) after start until the agent
// exits. The shipped agent serves no pprof endpoint, and adding one to it only for the bench
// would widen what a privileged node process exposes.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/pvrescue/pvrescue/cmd/pvrescue-agent/app"
	"github.com/pvrescue/pvrescue/internal/cmdutil"
	"github.com/pvrescue/pvrescue/internal/cmdutil/kubecmd"
)

// Environment variables read by agentprof.
const (
	ProfileEnv      = "PVRESCUE_BENCH_CPUPROFILE"
	ProfileAfterEnv = "PVRESCUE_BENCH_CPUPROFILE_AFTER"
)

func main() {
	os.Exit(cmdutil.Run(func(ctx context.Context) int {
		stop, err := startProfile(ctx, os.Getenv(ProfileEnv), os.Getenv(ProfileAfterEnv))
		if err != nil {
			fmt.Fprintln(os.Stderr, "agentprof:", err)
			return 2
		}
		defer stop()
		return kubecmd.Execute(ctx, app.NewCommand(app.Run))
	}))
}

// startProfile starts the CPU profile at path after the delay (in the background) and returns
// the function that stops it and closes the file.
func startProfile(ctx context.Context, path, after string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	var delay time.Duration
	if after != "" {
		d, err := time.ParseDuration(after)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ProfileAfterEnv, err)
		}
		delay = d
	}
	f, err := os.Create(path) //nolint:gosec // the bench names its own profile file in the environment it starts this with
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	started := make(chan bool, 1)
	go func() {
		select {
		case <-ctx.Done():
			started <- false
			return
		case <-time.After(delay):
		}
		started <- pprof.StartCPUProfile(f) == nil
	}()
	return func() {
		cancel()
		if <-started {
			pprof.StopCPUProfile()
		}
		_ = f.Close()
	}, nil
}
