// Command csi-s3-test is the end-to-end suite's S3 CSI node plugin (see package csitest).
//
//	csi-s3-test [flags]           the node plugin (the DaemonSet's csi-s3 container)
//	csi-s3-test register [flags]  the registrar (its driver-registrar sidecar)
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/go-logr/stdr"
	"github.com/spf13/pflag"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fs := pflag.NewFlagSet("csi-s3-test", pflag.ContinueOnError)
	var runFn func(context.Context) error
	name := "csi-s3-test"
	if len(args) > 0 && args[0] == "register" {
		args, name = args[1:], "csi-s3-test-registrar"
		o := csitest.NewRegistrarOptions()
		o.AddFlags(fs)
		runFn = func(ctx context.Context) error { return csitest.RunRegistrar(ctx, o) }
	} else {
		o := csitest.NewOptions()
		o.AddFlags(fs)
		runFn = func(ctx context.Context) error { return csitest.Run(ctx, o) }
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx = logr.NewContext(ctx, stdr.New(nil).WithName(name))
	if err := runFn(ctx); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1
	}
	return 0
}
