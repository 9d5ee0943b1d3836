// Command pvrescue-webhook is the mutating admission webhook that prepares pods for the rescues.
package main

import (
	"context"
	"os"

	"github.com/pvrescue/pvrescue/cmd/pvrescue-webhook/app"
	"github.com/pvrescue/pvrescue/internal/cmdutil"
	"github.com/pvrescue/pvrescue/internal/cmdutil/kubecmd"
)

func main() {
	os.Exit(cmdutil.Run(func(ctx context.Context) int {
		return kubecmd.Execute(ctx, app.NewRootCommand(app.Serve))
	}))
}
