// Command csi-s3-test is the end-to-end suite's S3 CSI node plugin (see package csis3).
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

	"github.com/pvrescue/pvrescue/e2e/csis3"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	o := csis3.NewOptions()
	fs := pflag.NewFlagSet("csi-s3-test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	ctx = logr.NewContext(ctx, stdr.New(nil).WithName("csi-s3-test"))
	if err := csis3.Run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "csi-s3-test:", err)
		os.Exit(1)
	}
}
