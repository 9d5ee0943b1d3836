// Command pvrescue-webhook is the mutating admission webhook that prepares pods for the rescues.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pvrescue/pvrescue/cmd/pvrescue-webhook/app"
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
	ctrllog.SetLogger(log)
	ctx = logr.NewContext(ctx, log)
	err = app.NewRootCommand(app.Serve).ExecuteContext(ctx)
	_ = zl.Sync()
	if err != nil {
		log.Error(err, "pvrescue-webhook failed")
		os.Exit(1)
	}
}
