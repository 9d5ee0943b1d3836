//go:build linux

package s3fs

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/ossthread"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// ErrNoCgroups is returned when no cgroup hierarchy is found.
var ErrNoCgroups = errors.New("no cgroup hierarchy found")

// HostCgroups places processes into the node's cgroup hierarchies. It takes them as the process
// at ProcDir sees them: /proc/1 is the node's init when the agent shares the host's PID namespace
// (hostPID), so its mountinfo lists the host's hierarchies and <ProcDir>/root reaches them,
// whatever the agent container has mounted. When that is not reachable (no CAP_SYS_PTRACE over
// init, or no hostPID), its own mounts, when they show whole hierarchies. Else — a container on
// cgroup v1 sees only its own cgroup's directory at /sys/fs/cgroup/<controller> — it mounts each
// hierarchy afresh under MountDir (a directory private to the agent's mount namespace: on v1,
// without a cgroup namespace, a new mount shows the whole hierarchy). Writes are made from a
// thread in ProcDir's cgroup namespace when it can join it: cgroup v2 refuses to move a process
// to a cgroup outside the writer's namespace.
type HostCgroups struct {
	ProcDir  string
	MountDir string
}

// NewCgroups returns the node's cgroups: HostCgroups for /proc/1, mounting under
// /tmp/pvrescue-cgroup if it must (the agent's /tmp is an emptyDir, private to its container).
func NewCgroups() Cgroups {
	return HostCgroups{ProcDir: "/proc/1", MountDir: "/tmp/pvrescue-cgroup"}
}

// view returns the process directory whose cgroup namespace is used, and the hierarchies' roots
// as reachable from here.
func (c HostCgroups) view() (string, []string, error) {
	var errs []error
	for _, dir := range []string{c.ProcDir, "/proc/self"} {
		roots, err := cgroupRoots(dir)
		if err == nil {
			return dir, roots, nil
		}
		errs = append(errs, err)
	}
	if c.MountDir != "" {
		roots, err := c.mountHierarchies()
		if err == nil {
			return "/proc/self", roots, nil
		}
		errs = append(errs, err)
	}
	return "", nil, errors.Join(errs...)
}

// cgroupMounts returns procDir's mountinfo and the cgroup hierarchies it shows.
func cgroupMounts(procDir string) (string, []CgroupMount, error) {
	data, err := os.ReadFile(filepath.Join(procDir, "mountinfo"))
	if err != nil {
		return "", nil, fmt.Errorf("read cgroup mounts: %w", err)
	}
	mounts := ParseCgroupMounts(string(data))
	if len(mounts) == 0 {
		return "", nil, fmt.Errorf("%w in %s", ErrNoCgroups, procDir)
	}
	return string(data), mounts, nil
}

// cgroupRoots returns the roots of every hierarchy procDir's mountinfo shows, when each is shown
// whole (root "/") and reachable through <procDir>/root.
func cgroupRoots(procDir string) ([]string, error) {
	_, mounts, err := cgroupMounts(procDir)
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, m := range mounts {
		if m.Root != "/" {
			return nil, fmt.Errorf("%s shows only %s of the %s hierarchy at %s", procDir, m.Root, strings.Join(m.Options, ","), m.MountPoint)
		}
		roots = append(roots, filepath.Join(procDir, "root", m.MountPoint))
	}
	if _, err := os.Stat(roots[0]); err != nil {
		return nil, fmt.Errorf("cgroup hierarchy %s: %w", roots[0], err)
	}
	return roots, nil
}

// mountHierarchies mounts every hierarchy our mountinfo shows afresh under MountDir (once; later
// calls reuse the mounts) and returns their roots.
func (c HostCgroups) mountHierarchies() ([]string, error) {
	data, mounts, err := cgroupMounts("/proc/self")
	if err != nil {
		return nil, err
	}
	table, err := stack.ParseMountInfo(data)
	if err != nil {
		return nil, err
	}
	var roots []string
	for _, m := range mounts {
		name := m.FSType
		if len(m.Options) > 0 {
			name = strings.NewReplacer("=", "_", ",", "_").Replace(strings.Join(m.Options, ","))
		}
		dir := filepath.Join(c.MountDir, name)
		if top, ok := table.Top(dir); ok && top.Root == "/" && (top.FSType == "cgroup" || top.FSType == "cgroup2") {
			roots = append(roots, dir)
			continue
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if err := unix.Mount(m.FSType, dir, m.FSType, unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, strings.Join(m.Options, ",")); err != nil {
			return nil, fmt.Errorf("mount the %s hierarchy (%s) at %s: %w", m.FSType, strings.Join(m.Options, ","), dir, err)
		}
		roots = append(roots, dir)
	}
	return roots, nil
}

// eachRoot runs f on the root of every hierarchy (view), in the view's cgroup namespace
// (inCgroupNS), and joins f's errors.
func (c HostCgroups) eachRoot(f func(root string) error) error {
	procDir, roots, err := c.view()
	if err != nil {
		return err
	}
	return inCgroupNS(procDir, func() error {
		var errs []error
		for _, root := range roots {
			if err := f(root); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	})
}

// Place creates group in every hierarchy (cpuset: with the parent's cpus and mems, or v1
// refuses tasks) and writes pid to its cgroup.procs.
func (c HostCgroups) Place(pid int, group string) error {
	return c.eachRoot(func(root string) error {
		dir, err := makeGroup(root, group)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		}
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", filepath.Join(root, group), err)
		}
		return nil
	})
}

// makeGroup creates root/group level by level.
func makeGroup(root, group string) (string, error) {
	dir := root
	for _, part := range strings.Split(group, "/") {
		parent := dir
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) { //nolint:gosec // a cgroup directory, 0755 as runc and systemd make them
			return "", err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			cur, err := os.ReadFile(filepath.Join(dir, f))
			if err != nil || strings.TrimSpace(string(cur)) != "" {
				continue // not a v1 cpuset hierarchy, or already set
			}
			val, err := os.ReadFile(filepath.Join(parent, f))
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(dir, f), val, 0); err != nil { //nolint:gosec // dir is a hierarchy root joined with the validated Options.BridgeCgroup and PVComponent
				return "", err
			}
		}
	}
	return dir, nil
}

// Remove removes group's leaf directory from every hierarchy (the parent stays for the next).
func (c HostCgroups) Remove(group string) error {
	return c.eachRoot(func(root string) error {
		if err := unix.Rmdir(filepath.Join(root, group)); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", filepath.Join(root, group), err)
		}
		return nil
	})
}

// Children returns the names of parent's child groups in every hierarchy, sorted.
func (c HostCgroups) Children(parent string) ([]string, error) {
	seen := map[string]bool{}
	err := c.eachRoot(func(root string) error {
		entries, err := os.ReadDir(filepath.Join(root, parent))
		for _, e := range entries {
			if e.IsDir() {
				seen[e.Name()] = true
			}
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("list cgroup %s: %w", filepath.Join(root, parent), err)
		}
		return nil
	})
	return slices.Sorted(maps.Keys(seen)), err
}

// SetLimits creates group (as Place does) and sets its limits in every hierarchy that has the
// controller: cgroup v1's cpu.cfs_period_us and cpu.cfs_quota_us, memory.limit_in_bytes; v2's
// cpu.max and memory.max (the controllers handed down from the level above when it is ours; the
// root's are the node's). The group gets the kernel's default CPU weight (v1 cpu.shares 1024,
// v2 cpu.weight 100): earlier agents weighed the bridges' groups 9548, above the pods'.
func (c HostCgroups) SetLimits(group string, l Limits) error {
	return c.eachRoot(func(root string) error {
		dir, err := makeGroup(root, group)
		if err == nil {
			err = setLimits(root, filepath.Dir(dir), dir, l)
		}
		if err != nil {
			return fmt.Errorf("cgroup %s: %w", filepath.Join(root, group), err)
		}
		return nil
	})
}

// cfsPeriodUs is the CPU period limits are set over (the kernel's default, 100 ms).
const cfsPeriodUs = 100000

// setLimits writes l into dir, a child of parent, in one hierarchy rooted at root.
func setLimits(root, parent, dir string, l Limits) error {
	write := func(f, v string) error { return os.WriteFile(filepath.Join(dir, f), []byte(v), 0) }
	exists := func(f string) bool { _, err := os.Stat(filepath.Join(dir, f)); return err == nil }
	quota := "-1"
	if l.CPUMillis > 0 {
		quota = strconv.FormatInt(l.CPUMillis*cfsPeriodUs/1000, 10)
	}
	if exists("cgroup.controllers") { // v2
		usable, err := enableV2(root, parent, dir, "cpu", "memory")
		if err != nil {
			return err
		}
		if usable["cpu"] {
			if err := write("cpu.weight", "100"); err != nil {
				return err
			}
			cpuMax := "max " + strconv.Itoa(cfsPeriodUs)
			if l.CPUMillis > 0 {
				cpuMax = quota + " " + strconv.Itoa(cfsPeriodUs)
			}
			if err := write("cpu.max", cpuMax); err != nil {
				return err
			}
		}
		if usable["memory"] {
			memMax := "max"
			if l.MemoryBytes > 0 {
				memMax = strconv.FormatInt(l.MemoryBytes, 10)
			}
			return write("memory.max", memMax)
		}
		return nil
	}
	if exists("cpu.cfs_quota_us") { // v1 cpu
		if err := write("cpu.shares", "1024"); err != nil {
			return err
		}
		if err := write("cpu.cfs_period_us", strconv.Itoa(cfsPeriodUs)); err != nil {
			return err
		}
		if err := write("cpu.cfs_quota_us", quota); err != nil {
			return err
		}
	}
	if exists("memory.limit_in_bytes") { // v1 memory
		limit := "-1"
		if l.MemoryBytes > 0 {
			limit = strconv.FormatInt(l.MemoryBytes, 10)
		}
		return write("memory.limit_in_bytes", limit)
	}
	return nil // a v1 hierarchy of other controllers
}

// enableV2 makes sure dir has the controllers' files, handing them down from parent when parent
// is a level of ours (never the root: its subtree_control is the node's), and returns those dir
// has. A controller the parent does not have (a hybrid node's unified hierarchy has none: v1
// holds them) is not one this hierarchy limits by.
func enableV2(root, parent, dir string, ctrls ...string) (map[string]bool, error) {
	usable := map[string]bool{}
	avail, _ := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	for _, ctrl := range ctrls {
		if _, err := os.Stat(filepath.Join(dir, ctrl+".max")); err == nil {
			usable[ctrl] = true
			continue
		}
		if !slices.Contains(strings.Fields(string(avail)), ctrl) {
			continue
		}
		if parent == root {
			return usable, fmt.Errorf("the root's cgroup.subtree_control does not enable %s", ctrl)
		}
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+"+ctrl), 0); err != nil {
			return usable, fmt.Errorf("enable the %s controller below %s: %w", ctrl, parent, err)
		}
		usable[ctrl] = true
	}
	return usable, nil
}

// Usage reads group's CPU time used and memory in use from the hierarchies that have them
// (v1: cpuacct.usage, memory.usage_in_bytes; v2: cpu.stat usage_usec, memory.current).
func (c HostCgroups) Usage(group string) (Usage, error) {
	var u Usage
	var found bool
	err := c.eachRoot(func(root string) error {
		dir := filepath.Join(root, group)
		if v, ok := readInt(filepath.Join(dir, "cpuacct.usage")); ok {
			u.CPUNanos, found = v, true
		}
		if v, ok := readInt(filepath.Join(dir, "memory.usage_in_bytes")); ok {
			u.MemoryBytes, found = v, true
		}
		if v, ok := readInt(filepath.Join(dir, "memory.current")); ok {
			u.MemoryBytes, found = v, true
		}
		if data, err := os.ReadFile(filepath.Join(dir, "cpu.stat")); err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						u.CPUNanos, found = n*1000, true
					}
				}
			}
		}
		return nil
	})
	if err == nil && !found {
		err = fmt.Errorf("%w holding %s", ErrNoCgroups, group)
	}
	return u, err
}

// readInt reads a file holding one decimal number.
func readInt(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return n, err == nil
}

// inCgroupNS runs f on a thread that joined procDir's cgroup namespace when it differs from
// ours: a thread of its own, never the main thread, retired afterwards (internal/ossthread).
func inCgroupNS(procDir string, f func() error) error {
	nsPath := filepath.Join(procDir, "ns", "cgroup")
	self, err1 := os.Stat("/proc/self/ns/cgroup")
	other, err2 := os.Stat(nsPath)
	if err1 != nil || err2 != nil || os.SameFile(self, other) {
		return f()
	}
	var ran bool
	err := ossthread.Enter(nsPath, unix.CLONE_NEWCGROUP, func() error {
		ran = true
		return f()
	})
	if err != nil && !ran {
		return fmt.Errorf("join cgroup namespace: %w", err)
	}
	return err
}
