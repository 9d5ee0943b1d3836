// Command pvrescue-agent is the per-node agent (a DaemonSet): fake devices for lost local disks
// and restored s3fs mounts.
package main

import (
	"context"
	"os"

	"github.com/pvrescue/pvrescue/cmd/pvrescue-agent/app"
	"github.com/pvrescue/pvrescue/internal/cmdutil"
	"github.com/pvrescue/pvrescue/internal/cmdutil/kubecmd"
)

func main() {
	os.Exit(cmdutil.Run(func(ctx context.Context) int {
		return kubecmd.Execute(ctx, app.NewCommand(app.Run))
	}))
}
