// Command pvrescue-agent is the per-node agent (a DaemonSet): fake devices for lost local disks
// and restored s3fs mounts.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"

	"github.com/pvrescue/pvrescue/cmd/pvrescue-agent/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	zl, err := zap.NewProduction()
	if err != nil {
		os.Stderr.WriteString("logger: " + err.Error() + "\n")
		os.Exit(1)
	}
	log := zapr.NewLogger(zl)
	ctx = logr.NewContext(ctx, log)
	cmd := app.NewCommand(app.Run)
	err = cmd.ExecuteContext(ctx)
	_ = zl.Sync()
	if err != nil {
		log.Error(err, "pvrescue-agent failed")
		os.Exit(1)
	}
}
