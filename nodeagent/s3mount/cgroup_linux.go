//go:build linux

package s3mount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoCgroups is returned when no cgroup hierarchy is found.
var ErrNoCgroups = errors.New("no cgroup hierarchy found")

// HostCgroups places processes into the node's cgroup hierarchies as the process at ProcDir sees
// them: /proc/1 is the node's init when the agent shares the host's PID namespace (hostPID), so
// its mountinfo lists the host's hierarchies and <ProcDir>/root reaches them, whatever the agent
// container itself has mounted. Writes are made from a thread in that process's cgroup
// namespace: cgroup v2 refuses to move a process to a cgroup outside the writer's namespace.
type HostCgroups struct{ ProcDir string }

// NewHostCgroups returns HostCgroups for /proc/1.
func NewHostCgroups() HostCgroups { return HostCgroups{ProcDir: "/proc/1"} }

// view returns the process directory whose view of the hierarchies is used, and the
// hierarchies' roots as reachable from here: ProcDir's when its root is reachable (hostPID,
// CAP_SYS_PTRACE), else our own (/proc/self) — on cgroup v1 without a cgroup namespace, a
// privileged container's own mounts are the node's hierarchies too.
func (c HostCgroups) view() (string, []string, error) {
	var errs []error
	for _, dir := range []string{c.ProcDir, "/proc/self"} {
		roots, err := cgroupRoots(dir)
		if err == nil {
			return dir, roots, nil
		}
		errs = append(errs, err)
	}
	return "", nil, errors.Join(errs...)
}

func cgroupRoots(procDir string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(procDir, "mountinfo"))
	if err != nil {
		return nil, fmt.Errorf("read cgroup mounts: %w", err)
	}
	table, err := ParseMountInfo(string(data))
	if err != nil {
		return nil, err
	}
	roots := CgroupDirs(table, filepath.Join(procDir, "root"), "")
	if len(roots) == 0 {
		return nil, fmt.Errorf("%w in %s", ErrNoCgroups, procDir)
	}
	if _, err := os.Stat(roots[0]); err != nil {
		return nil, fmt.Errorf("cgroup hierarchy %s: %w", roots[0], err)
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
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
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
			if err := os.WriteFile(filepath.Join(dir, f), val, 0); err != nil {
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

// inCgroupNS runs f on a thread that joined procDir's cgroup namespace when it differs from
// ours. The thread is never unlocked: it ends with its goroutine, and its namespace with it.
func inCgroupNS(procDir string, f func() error) error {
	nsPath := filepath.Join(procDir, "ns", "cgroup")
	self, err1 := os.Stat("/proc/self/ns/cgroup")
	other, err2 := os.Stat(nsPath)
	if err1 != nil || err2 != nil || os.SameFile(self, other) {
		return f()
	}
	res := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			res <- fmt.Errorf("open %s: %w", nsPath, err)
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWCGROUP); err != nil {
			res <- fmt.Errorf("join cgroup namespace %s: %w", nsPath, err)
			return
		}
		res <- f()
	}()
	return <-res
}
