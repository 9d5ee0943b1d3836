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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/testenv"
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

// A bridge driven by parallel writes beside a busy sibling group weighed like kubelet's pods
// (cpu.shares 2048, kubepods on two cores): a real s3fs of a real S3 server, placed as the
// Supervisor places it (the parent's limits, then its own, then the process), and eight writers
// copying 24 MiB each into it while two busy loops fill the sibling. The bridge's CPU stays
// within its quota and its memory within its limit; both limits are hit (it is throttled, it
// does not just idle below them) and the bridge still answers afterwards. The groups keep the
// kernel's default CPU weight: no bridge outranks the pods.
func TestNodeBridgeLimits(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("needs root (cgroup directories of the node, s3fs): run make node as root")
	}
	root, _ := cpuHierarchy(t)
	c := s3fs.HostCgroups{ProcDir: "/proc/self"}
	top := fmt.Sprintf("pvrescue-limtest-%d", os.Getpid())
	parent, bridgeGroup, pods := top+"/s3", top+"/s3/pv-a-1", top+"/pods"
	all := s3fs.Limits{CPUMillis: 400, MemoryBytes: 512 << 20}
	each := s3fs.Limits{CPUMillis: 250, MemoryBytes: 160 << 20}

	srv := testenv.S3(t, "bkt")
	m := testenv.S3fs(t, srv, "bkt", "parallel_count=8", "multipart_size=8")
	pid := m.Cmd.Process.Pid
	var busy []*exec.Cmd
	t.Cleanup(func() {
		for _, p := range busy {
			_ = p.Process.Kill()
			_, _ = p.Process.Wait()
		}
		m.Kill()
		for _, g := range []string{bridgeGroup, parent, pods, top} {
			for range 20 {
				if err := c.Remove(g); err == nil || !errors.Is(err, syscall.EBUSY) {
					break
				}
				time.Sleep(100 * time.Millisecond) // the killed processes leave their groups
			}
		}
	})
	for _, x := range []struct {
		g string
		l s3fs.Limits
	}{{top, s3fs.Limits{}}, {parent, all}, {bridgeGroup, each}} {
		if err := c.SetLimits(x.g, x.l); err != nil {
			t.Fatalf("SetLimits(%s, %+v): %v", x.g, x.l, err)
		}
	}
	if err := c.Place(pid, bridgeGroup); err != nil {
		t.Fatalf("place s3fs: %v", err)
	}
	// The pods' stand-in: two busy loops in a sibling weighed as kubepods is on two cores.
	for range 2 {
		p := exec.Command("sh", "-c", "while :; do :; done")
		if err := p.Start(); err != nil {
			t.Fatal(err)
		}
		busy = append(busy, p)
		if err := c.Place(p.Process.Pid, pods); err != nil {
			t.Fatalf("place a busy loop: %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, pods, "cpu.shares"), []byte("2048"), 0); err != nil {
		t.Fatalf("weigh the pods' stand-in: %v", err)
	}
	for _, g := range []string{top, parent, bridgeGroup} {
		if got, err := os.ReadFile(filepath.Join(root, g, "cpu.shares")); err != nil || strings.TrimSpace(string(got)) != "1024" {
			t.Errorf("cpu.shares of %s = %q (%v), want the kernel's default 1024 (no bridge outranks the pods)", g, got, err)
		}
	}

	// Eight writers, as a pod's parallel writes through the bridge.
	src := filepath.Join(t.TempDir(), "src")
	if err := exec.Command("dd", "if=/dev/urandom", "of="+src, "bs=1M", "count=24").Run(); err != nil {
		t.Fatal(err)
	}
	u0, err := c.Usage(bridgeGroup)
	if err != nil {
		t.Fatalf("Usage: %v", err)
	}
	ticks0, start := cpuTicks(t, pid), time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := exec.Command("cp", src, filepath.Join(m.MountPoint, fmt.Sprintf("w%d", i))).CombinedOutput(); err != nil {
				errs <- fmt.Errorf("writer %d: %w: %s", i, err, out)
			}
		}()
	}
	var maxMem int64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timeout := time.After(3 * time.Minute)
wait:
	for {
		select {
		case <-done:
			break wait
		case <-timeout:
			t.Fatal("the writers did not finish within 3 minutes")
		case <-time.After(100 * time.Millisecond):
			if u, err := c.Usage(bridgeGroup); err == nil {
				maxMem = max(maxMem, u.MemoryBytes)
			}
		}
	}
	wall := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	u1, _ := c.Usage(bridgeGroup)
	cores := float64(u1.CPUNanos-u0.CPUNanos) / 1e9 / wall.Seconds()
	procCores := float64(cpuTicks(t, pid)-ticks0) / 100 / wall.Seconds()
	throttled := readStat(t, filepath.Join(root, bridgeGroup, "cpu.stat"), "nr_throttled")
	memRoot := hierarchyOf(t, "memory")
	failcnt, _ := os.ReadFile(filepath.Join(memRoot, bridgeGroup, "memory.failcnt"))
	peak, _ := os.ReadFile(filepath.Join(memRoot, bridgeGroup, "memory.max_usage_in_bytes"))
	t.Logf("8 writers × 24 MiB through the bridge in %s beside 2 busy loops (cpu.shares 2048): the bridge's group used %.3f cores (s3fs alone %.3f) against its quota of %dm, throttled %d times; memory peak %s B (sampled max %d) against %d, failcnt %s",
		wall.Round(time.Millisecond), cores, procCores, each.CPUMillis, throttled, strings.TrimSpace(string(peak)), maxMem, each.MemoryBytes, strings.TrimSpace(string(failcnt)))
	if limit := float64(each.CPUMillis) / 1000; cores > limit*1.1 {
		t.Errorf("the bridge used %.3f cores, above its limit of %.3f (+10%%)", cores, limit)
	}
	if throttled == 0 {
		t.Errorf("the bridge was never throttled: the writes did not drive it to its CPU limit, the check above proves nothing")
	}
	if p, err := strconv.ParseInt(strings.TrimSpace(string(peak)), 10, 64); err != nil || p > each.MemoryBytes {
		t.Errorf("the bridge's memory peak %q (%v) is above its limit %d", peak, err, each.MemoryBytes)
	}
	select {
	case <-m.Done():
		t.Fatalf("the bridge's s3fs exited under its limits: %s", m.Log())
	default:
	}
	for i := range 8 {
		if fi, err := os.Stat(filepath.Join(m.MountPoint, fmt.Sprintf("w%d", i))); err != nil || fi.Size() != 24<<20 {
			t.Errorf("file w%d through the bridge: %v, %v", i, fi, err)
		}
	}
}

// readStat reads one key of a cgroup stat file (0 when absent).
func readStat(t *testing.T, path, key string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// hierarchyOf is the mount point of the v1 hierarchy holding controller.
func hierarchyOf(t *testing.T, controller string) string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range s3fs.ParseCgroupMounts(string(data)) {
		if slices.Contains(m.Options, controller) {
			return m.MountPoint
		}
	}
	t.Fatalf("no cgroup v1 hierarchy of the %s controller on this node", controller)
	return ""
}
