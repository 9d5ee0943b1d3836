// Command freshdevices brings the machine's loop devices back to a fresh boot's (loop0-7 only):
// it removes every loop device above loop7 that is not attached — its /dev node and its kernel
// device — so that a test depending on devices an earlier run left behind fails in CI, not on a
// new user's machine. Attached devices are left alone. Run as root (make fresh-devices).
package main

import (
	"fmt"
	"os"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

func main() {
	os.Exit(run())
}

func run() int {
	removed, err := testenv.FreshLoopDevices()
	for _, p := range removed {
		fmt.Println("removed", p)
	}
	fmt.Printf("fresh-devices: removed %d unattached loop device nodes above loop7\n", len(removed))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fresh-devices:", err)
		return 1
	}
	return 0
}
