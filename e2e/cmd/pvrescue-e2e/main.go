// Command pvrescue-e2e tears down what an e2e run or `make demo` left on this machine:
// `pvrescue-e2e down --work-dir DIR` stops every process recorded there and removes containers,
// mounts, loop devices, network namespaces, the bridge, iptables rules and files.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/framework"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "down" {
		fmt.Fprintln(os.Stderr, "usage: pvrescue-e2e down [--work-dir DIR]")
		os.Exit(2)
	}
	o := framework.ClusterOptions("suite")
	fs := pflag.NewFlagSet("down", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(os.Args[2:]); err != nil {
		os.Exit(2)
	}
	o.Logf = func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "pvrescue-e2e down:", err)
		os.Exit(1)
	}
}

func run(_ context.Context, o *cluster.Options) error {
	if _, err := os.Stat(o.WorkDir); err != nil {
		fmt.Printf("nothing to remove: %s does not exist\n", o.WorkDir)
		return nil
	}
	fmt.Printf("removing the cluster in %s\n", o.WorkDir)
	return cluster.Teardown(o)
}
