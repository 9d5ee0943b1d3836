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
	"github.com/pvrescue/pvrescue/internal/priority"
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

// NewHostCgroups returns HostCgroups for /proc/1, mounting under /tmp/pvrescue-cgroup if it must
// (the agent's /tmp is an emptyDir, private to its container).
func NewHostCgroups() HostCgroups {
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

// cgroupRoots returns the roots of every hierarchy procDir's mountinfo shows, when each is shown
// whole (root "/") and reachable through <procDir>/root.
func cgroupRoots(procDir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(procDir, "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("read cgroup mounts: %w", err)
	}
	mounts := ParseCgroupMounts(string(data))
	if len(mounts) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoCgroups, procDir)
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
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read cgroup mounts: %w", err)
	}
	mounts := ParseCgroupMounts(string(data))
	if len(mounts) == 0 {
		return nil, ErrNoCgroups
	}
	table, err := stack.ParseMountInfo(string(data))
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

// Place creates group in every hierarchy (cpuset: with the parent's cpus and mems, or v1
// refuses tasks) and writes pid to its cgroup.procs.
func (c HostCgroups) Place(pid int, group string) error {
	procDir, roots, err := c.view()
	if err != nil {
		return err
	}
	return inCgroupNS(procDir, func() error {
		var errs []error
		for _, root := range roots {
			dir, err := makeGroup(root, group)
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", filepath.Join(root, group), err))
			}
		}
		return errors.Join(errs...)
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
	procDir, roots, err := c.view()
	if err != nil {
		return err
	}
	return inCgroupNS(procDir, func() error {
		var errs []error
		for _, root := range roots {
			if err := unix.Rmdir(filepath.Join(root, group)); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("remove cgroup %s: %w", filepath.Join(root, group), err))
			}
		}
		return errors.Join(errs...)
	})
}

// Children returns the names of parent's child groups in every hierarchy, sorted.
func (c HostCgroups) Children(parent string) ([]string, error) {
	procDir, roots, err := c.view()
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	err = inCgroupNS(procDir, func() error {
		var errs []error
		for _, root := range roots {
			entries, err := os.ReadDir(filepath.Join(root, parent))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("list cgroup %s: %w", filepath.Join(root, parent), err))
			}
			for _, e := range entries {
				if e.IsDir() {
					seen[e.Name()] = true
				}
			}
		}
		return errors.Join(errs...)
	})
	return slices.Sorted(maps.Keys(seen)), err
}

// SetCPUWeight writes weight to each level of group below every hierarchy's root that has the
// cpu controller: cpu.shares (v1), or cpu.weight (v2, converted as runc converts cpu.shares),
// handing the controller down from a level of ours to the next when that level does not yet.
// A group weighs against its siblings only, so every level must carry it: the bridges' parent
// competes with the node's top-level groups (kubelet's pods, the system's daemons).
func (c HostCgroups) SetCPUWeight(group string, weight uint64) error {
	_, roots, err := c.view()
	if err != nil {
		return err
	}
	var errs []error
	weighed := false
	for _, root := range roots {
		dir := root
		for _, part := range strings.Split(group, "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			ok, err := setCPUWeight(parent, dir, parent == root, weight)
			if err != nil {
				errs = append(errs, fmt.Errorf("cgroup %s: %w", dir, err))
				break
			}
			if !ok {
				break // no cpu controller in this hierarchy
			}
			weighed = true
		}
	}
	if !weighed && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%w with the cpu controller over %s", ErrNoCgroups, group))
	}
	return errors.Join(errs...)
}

// setCPUWeight weighs dir, a child of parent (the hierarchy's root when atRoot); false when
// dir's hierarchy has no cpu controller.
func setCPUWeight(parent, dir string, atRoot bool, weight uint64) (bool, error) {
	if _, err := os.Stat(filepath.Join(dir, "cpu.shares")); err == nil {
		return true, os.WriteFile(filepath.Join(dir, "cpu.shares"), []byte(strconv.FormatUint(weight, 10)), 0)
	}
	ctrls, err := os.ReadFile(filepath.Join(parent, "cgroup.controllers"))
	if err != nil || !slices.Contains(strings.Fields(string(ctrls)), "cpu") {
		return false, nil // v1 without cpu, or v2 whose parent has no cpu controller
	}
	if _, err := os.Stat(filepath.Join(dir, "cpu.weight")); errors.Is(err, fs.ErrNotExist) {
		if atRoot {
			// The root hands its controllers down as the node's init chose; not ours to change.
			return false, fmt.Errorf("the root's cgroup.subtree_control does not enable cpu")
		}
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+cpu"), 0); err != nil {
			return false, fmt.Errorf("enable the cpu controller below %s: %w", parent, err)
		}
	}
	return true, os.WriteFile(filepath.Join(dir, "cpu.weight"), []byte(strconv.FormatUint(priority.CgroupV2Weight(weight), 10)), 0)
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
