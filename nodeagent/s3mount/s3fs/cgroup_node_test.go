//go:build node

package s3fs_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

// The node's cgroups, as the start-up sweep uses them: Children lists the groups under a parent
// in every hierarchy, Remove removes an empty one and the kernel refuses one that still has a
// process (EBUSY) — the sweep's guard for a bridge that outlived every record.
func TestNodeCgroupChildrenAndBusyRemove(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root (cgroup directories of the node): run make node as root")
	}
	c := s3fs.HostCgroups{ProcDir: "/proc/self"}
	parent := fmt.Sprintf("pvrescue-cgtest-%d/s3", os.Getpid())
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	empty, busy := parent+"/pv-a-123", fmt.Sprintf("%s/pv-b-%d", parent, sleeper.Process.Pid)
	t.Cleanup(func() {
		_ = sleeper.Process.Kill()
		_, _ = sleeper.Process.Wait()
		for _, g := range []string{empty, busy, parent, parent[:len(parent)-len("/s3")]} {
			_ = c.Remove(g)
		}
	})
	if got, err := c.Children(parent); err != nil || len(got) != 0 {
		t.Fatalf("Children of a missing parent = %v, %v; want none, no error", got, err)
	}
	// An empty group is made as Place makes one (a process placed, then gone).
	helper := exec.Command("sleep", "60")
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.Place(helper.Process.Pid, empty); err != nil {
		t.Fatalf("place: %v", err)
	}
	_ = helper.Process.Kill()
	_, _ = helper.Process.Wait()
	if err := c.Place(sleeper.Process.Pid, busy); err != nil {
		t.Fatalf("place: %v", err)
	}
	got, err := c.Children(parent)
	want := []string{"pv-a-123", fmt.Sprintf("pv-b-%d", sleeper.Process.Pid)}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Children = %v, %v; want %v", got, err, want)
	}
	if err := c.Remove(busy); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("removing a group with a process: %v, want EBUSY", err)
	}
	if err := c.Remove(empty); err != nil {
		t.Fatalf("removing an empty group: %v", err)
	}
	if got, _ := c.Children(parent); !slices.Equal(got, want[1:]) {
		t.Fatalf("after the removal Children = %v, want %v", got, want[1:])
	}
}
