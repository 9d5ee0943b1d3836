//go:build linux

package cluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// Host cleanup: everything a cluster (or a crashed run, from its work dir alone) leaves on the
// host outside its work dir — containers and shims, mounts, network namespaces, the bridge and
// NAT rules, loop devices and their nodes, /dev/disk/by-id links, kubepods cgroups. The pure
// parts (mountinfo, backing-file names) are in hostclean.go.

// removeContainers deletes every container of our runc root (so they stop, and their cgroups go)
// and kills the containerd shims serving our socket, which would otherwise outlive containerd.
func (c *Cluster) removeContainers() error {
	var errs []error
	roots, _ := filepath.Glob(c.Opts.path("containerd", "runc", "*"))
	for _, root := range roots {
		out, err := exec.Command("runc", "--root", root, "list", "-q").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("runc list in %s: %w", root, err))
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			if b, err := exec.Command("runc", "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("runc delete %s: %w: %s", id, err, b))
			}
		}
	}
	sock := c.Opts.path("run", "containerd.sock")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.Contains(args[0], "containerd-shim") && strings.Contains(string(b), sock) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return errors.Join(errs...)
}

// CleanHost undoes the host-wide effects of a cluster whose files are under dirs.
func CleanHost(bridge string, dirs ...string) error {
	var errs []error
	errs = append(errs, unmountUnder(dirs...))
	errs = append(errs, removeNetns())
	errs = append(errs, DetachLoopsUnder(dirs...))
	if exec.Command("ip", "link", "show", bridge).Run() == nil {
		if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete bridge %s: %w: %s", bridge, err, out))
		}
	}
	for _, hook := range []string{"PREROUTING", "OUTPUT"} {
		for exec.Command("iptables", "-t", "nat", "-D", hook, "-j", iptablesChain).Run() == nil {
		}
	}
	if exec.Command("iptables", "-t", "nat", "-F", iptablesChain).Run() == nil {
		_ = exec.Command("iptables", "-t", "nat", "-X", iptablesChain).Run()
	}
	removeKubeCgroups()
	errs = append(errs, removeDiskLinks())
	return errors.Join(errs...)
}

// DiskLinkPrefix starts the name of every /dev/disk/by-id link of the suite's disks (and of the
// agent's fakes standing in for them) and of the admin links the provisioner-layout scenario makes
// in discovery directories; teardown removes them all.
const DiskLinkPrefix = "pvrescue-e2e-"

// discoveryDirs are the local-static-provisioner discovery directories the scenarios link disks into.
var discoveryDirs = []string{"/mnt/fast-disks", "/mnt/disks"}

func removeDiskLinks() error {
	links, _ := filepath.Glob("/dev/disk/by-id/" + DiskLinkPrefix + "*")
	for _, dir := range discoveryDirs {
		admin, _ := filepath.Glob(filepath.Join(dir, DiskLinkPrefix+"*"))
		links = append(links, admin...)
	}
	var errs []error
	for _, l := range links {
		if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func unmountUnder(roots ...string) error {
	var errs []error
	// Stacked and propagated mounts can reappear once a parent goes: a few passes.
	for pass := 0; pass < 5; pass++ {
		info, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		mps := MountPointsUnder(string(info), roots...)
		if len(mps) == 0 {
			return nil
		}
		errs = nil
		for _, mp := range mps {
			if err := unix.Unmount(mp, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				if err2 := unix.Unmount(mp, unix.MNT_DETACH); err2 != nil && !errors.Is(err2, unix.EINVAL) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err2))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// removeNetns removes the pod network namespaces containerd's CNI made (/run/netns/cni-*).
func removeNetns() error {
	var errs []error
	ns, _ := filepath.Glob("/run/netns/cni-*")
	for _, n := range ns {
		if err := unix.Unmount(n, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", n, err))
		}
		if err := os.Remove(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	_ = os.Remove("/run/netns") // only when empty: containerd made it
	return errors.Join(errs...)
}

// DetachLoopsUnder detaches every loop device whose backing file is under one of roots, and
// removes the /dev/loopN node when N is at least 100 (numbers kept for devices made by mknod).
func DetachLoopsUnder(roots ...string) error {
	var errs []error
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !UnderAny(string(b), roots...) {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		if err := DetachLoop(dev); err != nil {
			errs = append(errs, err)
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dev), "loop")); err == nil && n >= 100 {
			_ = os.Remove(dev)
		}
	}
	return errors.Join(errs...)
}

// DetachLoop detaches a loop device (LOOP_CLR_FD). The kernel detaches lazily while it is open.
func DetachLoop(dev string) error {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dev, err)
	}
	defer func() { _ = unix.Close(fd) }() // read-only use; nothing to report
	if err := unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	return nil
}

// removeKubeCgroups removes kubelet's kubepods cgroups (empty once the containers are deleted).
func removeKubeCgroups() {
	subs, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	for _, s := range subs {
		var dirs []string
		_ = filepath.WalkDir(s, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = unix.Rmdir(dirs[i])
		}
	}
}

func removeWorkDir(dir string, keepLogs bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if keepLogs && e.Name() == "logs" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if !keepLogs {
		errs = append(errs, os.Remove(dir))
	}
	return errors.Join(errs...)
}

const loopsBefore = "loops-before"

// recordLoops remembers the loop devices attached before the cluster started.
func recordLoops(path string) error {
	var lines []string
	for dev, back := range attachedLoops() {
		lines = append(lines, dev+" "+back)
	}
	for _, n := range agentLoopNodes() {
		lines = append(lines, "node "+n)
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}

// suiteLoopRanges are where the suite's loop devices are made: the agent's fakes (config
// firstLoopMinor and the next 31) and the suite's disks (testenv.TestLoops).
func suiteLoopRanges() []testenv.LoopRange {
	first := config.Default().LocalBlock.FirstLoopMinor
	return []testenv.LoopRange{{First: first, Last: first + 31}, testenv.TestLoops}
}

// agentLoopNodes lists the /dev/loopN nodes in the suite's ranges.
func agentLoopNodes() []string {
	var out []string
	for _, r := range suiteLoopRanges() {
		for n := r.First; n <= r.Last; n++ {
			if p := testenv.LoopDevPath(n); exists(p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// removeNewLoopNodes removes the loop devices in the suite's ranges that appeared since Up and
// are detached: their nodes and their kernel devices (a node-less kernel device would be taken
// by the next `losetup --find`, which then fails).
func removeNewLoopNodes(beforeFile string) {
	b, err := os.ReadFile(beforeFile)
	if err != nil {
		return
	}
	before := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(line, "node "); ok {
			before[n] = true
		}
	}
	for _, r := range suiteLoopRanges() {
		_, _ = testenv.RemoveLoopNodes(r, func(minor int) bool { return before[testenv.LoopDevPath(minor)] })
	}
}

func attachedLoops() map[string]string {
	m := map[string]string{}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			m["/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f)))] = strings.TrimSpace(string(b))
		}
	}
	return m
}

// detachNewForeignLoops detaches loop devices attached since Up whose backing file was opened in
// another mount namespace, which the kernel then names relative to that mount ("/" for kubelet's
// device locks on bind-mounted device nodes, "/localdisk/…" for the agent's fakes in its state-dir
// mount): paths under the work dir cannot name them.
func detachNewForeignLoops(beforeFile string) error {
	b, err := os.ReadFile(beforeFile)
	if err != nil {
		return nil // no record: never guess
	}
	before := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if dev, back, ok := strings.Cut(line, " "); ok {
			before[dev] = back
		}
	}
	var errs []error
	for dev, back := range attachedLoops() {
		if prev, ok := before[dev]; ok && prev == back {
			continue
		}
		if ForeignLoopBacking(back) {
			errs = append(errs, DetachLoop(dev))
			if n, err := strconv.Atoi(strings.TrimPrefix(dev, "/dev/loop")); err == nil && n >= 100 {
				_ = os.Remove(dev)
			}
		}
	}
	return errors.Join(errs...)
}
