// Command pvrescue-sidecar is the static helper the pvrescue webhook injects into pods: it
// filters fake devices (guard, exec), probes FUSE mounts (probe) and installs itself (install).
// See package sidecar for the command line, which is a contract with the webhook.
package main

import (
	"context"
	"os"

	"github.com/pvrescue/pvrescue/internal/cmdutil"
	"github.com/pvrescue/pvrescue/sidecar"
)

func main() {
	os.Exit(cmdutil.Run(func(ctx context.Context) int {
		return sidecar.Main(ctx, os.Args[1:], sidecar.NewEnv())
	}))
}
