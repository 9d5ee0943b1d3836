// kubectl-pvrescue is the kubectl plugin of pvrescue (`kubectl pvrescue status|explain`).
package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/pvrescue/pvrescue/cmd/kubectl-pvrescue/app"
	"github.com/pvrescue/pvrescue/internal/cmdutil"
)

func main() {
	os.Exit(cmdutil.Run(func(ctx context.Context) int {
		streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
		if err := app.NewCommand(app.NewOptions(streams)).ExecuteContext(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			return 1
		}
		return 0
	}))
}
