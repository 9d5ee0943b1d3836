// Package cmdutil is the entry every pvrescue main shares: a context cancelled on SIGTERM or
// interrupt, and an exit code returned only after the program — with its deferred cleanup — has
// finished. It uses the standard library alone, so the static helper (pvrescue-sidecar) stays
// small; the Kubernetes-facing binaries add package kubecmd (log flags, client configuration).
package cmdutil

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Run calls program with a context that ends on SIGTERM or interrupt and returns its exit code.
// A main is `func main() { os.Exit(cmdutil.Run(program)) }`: os.Exit runs after Run returned,
// so no deferred function of program is skipped.
func Run(program func(ctx context.Context) int) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	return program(ctx)
}
