//go:build node

package s3fs_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/priority"
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

// cpuHierarchy is where this node's cpu controller is: a v1 hierarchy with cpu.shares, or the
// v2 one when its root hands cpu down; the file a group's weight is read from there.
func cpuHierarchy(t *testing.T) (root, file string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s3fs.ParseCgroupMounts(string(data)) {
		if _, err := os.Stat(filepath.Join(m.MountPoint, "cpu.shares")); err == nil {
			return m.MountPoint, "cpu.shares"
		}
		if ctl, err := os.ReadFile(filepath.Join(m.MountPoint, "cgroup.subtree_control")); err == nil && slices.Contains(strings.Fields(string(ctl)), "cpu") {
			return m.MountPoint, "cpu.weight"
		}
	}
	t.Fatal("no cgroup hierarchy with the cpu controller on this node: the bridges' weight cannot be set here (mount the cpu hierarchy, or enable cpu in the v2 root's cgroup.subtree_control)")
	return "", ""
}

// cpuTicks is a process's user and system time in clock ticks.
func cpuTicks(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}

// SetCPUWeight weighs the group and every level above it, and the kernel shares a CPU by it: two
// busy processes on one CPU, each in a group of its own, one of them weighed as nice -10 is
// (9548) and the other left at the default, get CPU about 9.3 to 1 — while the nice value of
// a process in its own group changes nothing against the other group (the reason the bridges'
// groups are weighed instead of relying on the nice s3fs inherits).
func TestNodeCgroupCPUWeight(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root (cgroup directories of the node): run make node as root")
	}
	root, file := cpuHierarchy(t)
	c := s3fs.HostCgroups{ProcDir: "/proc/self"}
	top := fmt.Sprintf("pvrescue-cgtest-%d", os.Getpid())
	busy := func(nice int) *exec.Cmd {
		cmd := exec.Command("taskset", "-c", "0", "nice", "-n", strconv.Itoa(nice), "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("start a busy loop (taskset, nice: util-linux, coreutils): %v", err)
		}
		return cmd
	}
	// run places a busy process at heavyNice in top/s3/heavy (weighed weight, 0: not) and one at
	// nice 0 in top/light, calls check while both run, and returns their CPU over 1.5 s.
	run := func(heavyNice int, weight uint64, check func(heavyGroup string)) (heavyTicks, lightTicks int) {
		heavy, light := busy(heavyNice), busy(0)
		hg, lg := top+"/s3/heavy", top+"/light"
		stop := func() {
			for _, p := range []*exec.Cmd{heavy, light} {
				_ = p.Process.Kill()
				_, _ = p.Process.Wait()
			}
			for _, g := range []string{hg, lg, top + "/s3", top} {
				if err := c.Remove(g); err != nil {
					t.Logf("remove %s: %v", g, err)
				}
			}
		}
		defer stop()
		if err := c.Place(heavy.Process.Pid, hg); err != nil {
			t.Fatalf("place: %v", err)
		}
		if err := c.Place(light.Process.Pid, lg); err != nil {
			t.Fatalf("place: %v", err)
		}
		if weight > 0 {
			if err := c.SetCPUWeight(hg, weight); err != nil {
				t.Fatalf("SetCPUWeight(%s, %d): %v", hg, weight, err)
			}
		}
		check(hg)
		h0, l0 := cpuTicks(t, heavy.Process.Pid), cpuTicks(t, light.Process.Pid)
		time.Sleep(1500 * time.Millisecond)
		return cpuTicks(t, heavy.Process.Pid) - h0, cpuTicks(t, light.Process.Pid) - l0
	}

	// Nice alone: the process at -10 in its own group gets no more than its sibling group.
	h, l := run(-10, 0, func(string) {})
	t.Logf("nice -10 in its own group %d ticks, a default group %d ticks", h, l)
	if l == 0 || float64(h)/float64(l) > 2 {
		t.Errorf("nice -10 in a group of its own: %d ticks against %d; want about even (a nice value ranks only within the group)", h, l)
	}
	// The weight: every level of the group carries it, and the CPU follows.
	want := strconv.FormatUint(priority.Weight(-10), 10)
	if file == "cpu.weight" {
		want = strconv.FormatUint(priority.CgroupV2Weight(priority.Weight(-10)), 10)
	}
	h, l = run(0, priority.Weight(-10), func(hg string) {
		for _, g := range []string{top, top + "/s3", hg} {
			got, err := os.ReadFile(filepath.Join(root, g, file))
			if err != nil || strings.TrimSpace(string(got)) != want {
				t.Errorf("%s of %s = %q (%v), want %s", file, g, got, err, want)
			}
		}
	})
	if l == 0 || float64(h)/float64(l) < 4 {
		t.Errorf("a group weighed %d against a default one on one CPU: %d ticks against %d; want about 9.3 to 1", priority.Weight(-10), h, l)
	}
	t.Logf("weighed group %d ticks, default group %d ticks", h, l)
}
