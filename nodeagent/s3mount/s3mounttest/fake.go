package s3mounttest

import (
	"context"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// FakeNode is an in-memory node for unit tests: a mount table where mounts can die, files with
// modes, and s3fs processes that mount (or fail) on start. It is safe for concurrent use.
type FakeNode struct {
	mu      sync.Mutex
	nextID  int
	nextDev int
	mounts  stack.Table
	dead    map[string]bool // by Dev
	hung    map[string]bool // by Dev: statfs times out
	busy    map[int]bool    // by mount ID: a file is open on it (a plain unmount fails EBUSY)
	files   map[string][]byte
	modes   map[string]fs.FileMode
	writes  map[string]int // FS.WriteFile calls, by path
	started [][]string
	procs   []*FakeProcess
	cgroups map[string][]int       // by group: pids placed there
	limits  map[string]s3fs.Limits // by group: what SetLimits gave it
	usage   map[string]s3fs.Usage  // by group: what Usage reports
	removed []string               // every path given to FS.Remove
	aborted []string               // devices whose FUSE connection was aborted
	// lingering: devices with files still open through a lazily detached mount.
	lingering map[string]bool
	specs     []s3fs.ProcSpec
	// tableReads counts the mount tables read through Mounter (not the tests' own Table calls).
	tableReads int

	// S3fsFailure decides whether a started s3fs fails; it gets the arguments and the content
	// of its passwd file and returns the output of a failed s3fs, or "" to mount.
	S3fsFailure func(args []string, passwd []byte) string
	// NetNSDenied says whether starting a process in a network namespace fails (ErrNetNS).
	NetNSDenied func(netns string) bool
	// BeforeStatfs, when set, runs at the start of every statfs, with its path (a daemon that
	// dies between two checks; set it before the node is shared).
	BeforeStatfs func(path string)
	// BeforeStart, when set, runs at the start of every process start, with its spec (set it
	// before the node is shared).
	BeforeStart func(spec s3fs.ProcSpec)
}

// NewFakeNode returns a node with only a root mount.
func NewFakeNode() *FakeNode {
	f := &FakeNode{nextID: 100, nextDev: 50, dead: map[string]bool{}, hung: map[string]bool{}, busy: map[int]bool{}, lingering: map[string]bool{},
		files: map[string][]byte{}, modes: map[string]fs.FileMode{}, writes: map[string]int{}, cgroups: map[string][]int{}}
	f.mounts = stack.Table{{ID: 1, ParentID: 0, Dev: "8:1", Root: "/", MountPoint: "/", Options: []string{"rw"}, FSType: "ext4", Source: "/dev/vda"}}
	return f
}

// Mounter, Procs, Cgroups, Statfs, FS and FUSE are the node's effects, for the rescue's OS.
func (f *FakeNode) Mounter() stack.Mounter      { return fakeMounter{f} }
func (f *FakeNode) Procs() s3fs.ProcessStarter  { return fakeProcs{f} }
func (f *FakeNode) Cgroups() s3fs.Cgroups       { return fakeCgroups{f} }
func (f *FakeNode) Statfs() stack.StatfsChecker { return fakeStatfs{f} }
func (f *FakeNode) FS() stack.FS                { return fakeFS{f} }
func (f *FakeNode) FUSE() stack.FUSEConnections { return fakeFUSE{f} }

type fakeFUSE struct{ f *FakeNode }

// Abort ends the connection of dev: its mounts answer ENOTCONN from now on.
func (x fakeFUSE) Abort(dev string) error {
	if _, err := stack.FUSEConnection(dev); err != nil {
		return err
	}
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	x.f.aborted = append(x.f.aborted, dev)
	delete(x.f.hung, dev)
	x.f.dead[dev] = true
	return nil
}

// Aborted returns the devices whose FUSE connection was aborted.
func (f *FakeNode) Aborted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.aborted)
}

// Resume makes a hung filesystem answer again (SIGCONT of a stopped daemon).
func (f *FakeNode) Resume(mountPoint string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if top, ok := f.mounts.Top(mountPoint); ok {
		delete(f.hung, top.Dev)
	}
}

// AddMount mounts a new filesystem at mountPoint (on top of anything there) and returns it.
func (f *FakeNode) AddMount(mountPoint, fsType, source string, options ...string) stack.Mount {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextDev++
	return f.addLocked(mountPoint, fmt.Sprintf("0:%d", f.nextDev), fsType, source, options)
}

func (f *FakeNode) addLocked(mountPoint, dev, fsType, source string, options []string) stack.Mount {
	f.nextID++
	parent := 1
	if top, ok := f.mounts.Top(mountPoint); ok {
		parent = top.ID
	}
	if len(options) == 0 {
		options = []string{"rw"}
	}
	m := stack.Mount{ID: f.nextID, ParentID: parent, Dev: dev, Root: "/", MountPoint: mountPoint,
		Options: options, FSType: fsType, Source: source}
	f.mounts = append(f.mounts, m)
	return m
}

// BindNodeDir mounts, at path, a bind of a directory of the node's own root filesystem (what the
// node's side shows when a driver mounted a path it does not share with the node and the
// directory was then bound: the same device as the mount it sits on).
func (f *FakeNode) BindNodeDir(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.addLocked(path, "8:1", "ext4", "/dev/vda", nil)
}

// Forget removes the mount with ID id from the table as if it had never been there (a stack
// the test builds by hand).
func (f *FakeNode) Forget(id int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mounts = slices.DeleteFunc(f.mounts, func(m stack.Mount) bool { return m.ID == id })
}

// KillMount makes the filesystem of the top mount at mountPoint dead (as kill -9 of s3fs does).
func (f *FakeNode) KillMount(mountPoint string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if top, ok := f.mounts.Top(mountPoint); ok {
		f.dead[top.Dev] = true
	}
}

// Hang makes the filesystem of the top mount at mountPoint hang: statfs of it times out (a
// live but unresponsive FUSE daemon). Mounts stacked on top later answer for themselves.
func (f *FakeNode) Hang(mountPoint string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if top, ok := f.mounts.Top(mountPoint); ok {
		f.hung[top.Dev] = true
	}
}

// OpenFile holds a file open on the top mount at mountPoint, as an app reading through it
// does: a plain unmount of that mount fails with EBUSY, a lazy one (MNT_DETACH) succeeds.
func (f *FakeNode) OpenFile(mountPoint string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if top, ok := f.mounts.Top(mountPoint); ok {
		f.busy[top.ID] = true
	}
}

// Table returns a copy of the mount table.
func (f *FakeNode) Table() stack.Table {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.mounts)
}

// Started returns the argument lists of every process started.
func (f *FakeNode) Started() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.started)
}

// Removed returns every path removed through FS.Remove (files and directories).
func (f *FakeNode) Removed() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.removed)
}

// Specs returns the specs of every process started.
func (f *FakeNode) Specs() []s3fs.ProcSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.specs)
}

// Cgroup returns the pids placed in group (and not removed).
func (f *FakeNode) Cgroup(group string) ([]int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pids, ok := f.cgroups[group]
	return slices.Clone(pids), ok
}

type fakeCgroups struct{ f *FakeNode }

func (c fakeCgroups) Place(pid int, group string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.cgroups[group] = append(c.f.cgroups[group], pid)
	return nil
}

func (c fakeCgroups) Remove(group string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	for _, pid := range c.f.cgroups[group] {
		for _, p := range c.f.procs {
			if p.pid == pid && !p.Exited() {
				return fmt.Errorf("remove cgroup %s: %w", group, syscall.EBUSY)
			}
		}
	}
	delete(c.f.cgroups, group)
	return nil
}

func (c fakeCgroups) Children(parent string) ([]string, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	var out []string
	for g := range c.f.cgroups {
		if name, ok := strings.CutPrefix(g, parent+"/"); ok && !strings.Contains(name, "/") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

func (c fakeCgroups) SetLimits(group string, l s3fs.Limits) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if _, ok := c.f.cgroups[group]; !ok {
		c.f.cgroups[group] = nil
	}
	if c.f.limits == nil {
		c.f.limits = map[string]s3fs.Limits{}
	}
	c.f.limits[group] = l
	return nil
}

func (c fakeCgroups) Usage(group string) (s3fs.Usage, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if _, ok := c.f.cgroups[group]; !ok {
		return s3fs.Usage{}, fmt.Errorf("usage of cgroup %s: %w", group, syscall.ENOENT)
	}
	return c.f.usage[group], nil
}

// Limits returns the limits set on group, and whether any were.
func (f *FakeNode) Limits(group string) (s3fs.Limits, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.limits[group]
	return l, ok
}

// SetUsage sets what Usage reports for group.
func (f *FakeNode) SetUsage(group string, u s3fs.Usage) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.usage == nil {
		f.usage = map[string]s3fs.Usage{}
	}
	f.usage[group] = u
}

// AddCgroup makes an empty group, as one left by an earlier agent.
func (f *FakeNode) AddCgroup(group string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cgroups[group]; !ok {
		f.cgroups[group] = nil
	}
}

// Processes returns the processes started so far.
func (f *FakeNode) Processes() []*FakeProcess {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procs)
}

// File returns a file's content and mode.
func (f *FakeNode) File(path string) ([]byte, fs.FileMode, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.files[path]
	return b, f.modes[path], ok
}

// SetFile writes a file (test setup).
func (f *FakeNode) SetFile(path string, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[path] = data
	f.modes[path] = 0o644
}

type fakeMounter struct{ f *FakeNode }

func (m fakeMounter) MountTable() (stack.Table, error) {
	m.f.mu.Lock()
	m.f.tableReads++
	m.f.mu.Unlock()
	return m.f.Table(), nil
}

// FileWrites returns how many times the code under test wrote path through FS.
func (f *FakeNode) FileWrites(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writes[path]
}

// TableReads returns how many mount tables the code under test has read through Mounter.
func (f *FakeNode) TableReads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tableReads
}

// coveringLocked is the mount point of the mount covering path (the longest mounted prefix).
func (f *FakeNode) coveringLocked(path string) string {
	best := ""
	for _, m := range f.mounts {
		if (path == m.MountPoint || strings.HasPrefix(path, strings.TrimSuffix(m.MountPoint, "/")+"/")) && len(m.MountPoint) > len(best) {
			best = m.MountPoint
		}
	}
	return best
}

func (m fakeMounter) Bind(source, target string, readOnly bool) error {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	src, ok := f.mounts.Top(source)
	if !ok {
		return fmt.Errorf("%w: bind %s: source is not a mount in the fake", stack.ErrMount, source)
	}
	opts := []string{"rw"}
	if readOnly {
		opts = []string{"ro"}
	}
	f.addLocked(target, src.Dev, src.FSType, src.Source, opts)
	return nil
}

func (m fakeMounter) Unmount(target string, detach bool) error {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	top, ok := f.mounts.Top(target)
	if !ok {
		return fmt.Errorf("%w: unmount %s: %w", stack.ErrMount, target, syscall.EINVAL)
	}
	if f.busy[top.ID] && !detach {
		return fmt.Errorf("%w: unmount %s: %w", stack.ErrMount, target, syscall.EBUSY)
	}
	if f.busy[top.ID] {
		f.lingering[top.Dev] = true // the open files keep the detached filesystem
	}
	f.mounts = slices.DeleteFunc(f.mounts, func(x stack.Mount) bool { return x.ID == top.ID })
	f.exitUnusedLocked()
	return nil
}

// exitUnusedLocked ends every s3fs whose filesystem is mounted nowhere and has no open file
// left: the kernel releases it and s3fs's session ends, as it does for a real one.
func (f *FakeNode) exitUnusedLocked() {
	for _, p := range f.procs {
		if p.dev == "" || p.Exited() || f.lingering[p.dev] || slices.ContainsFunc(f.mounts, func(m stack.Mount) bool { return m.Dev == p.dev }) {
			continue
		}
		p.exit()
	}
}

// CloseFiles closes the files held open on the filesystem of device dev (see OpenFile).
func (f *FakeNode) CloseFiles(dev string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.lingering, dev)
	for _, m := range f.mounts {
		if m.Dev == dev {
			delete(f.busy, m.ID)
		}
	}
	f.exitUnusedLocked()
}

func (m fakeMounter) MountTmpfs(target string, _ int64) error {
	m.f.AddMount(target, "tmpfs", "tmpfs")
	return nil
}

type fakeStatfs struct{ f *FakeNode }

func (s fakeStatfs) Statfs(_ context.Context, path string, timeout time.Duration) error {
	f := s.f
	if f.BeforeStatfs != nil {
		f.BeforeStatfs(path)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// The mount covering path is the top mount at its longest mounted prefix.
	top, ok := f.mounts.Top(f.coveringLocked(path))
	if ok && f.hung[top.Dev] {
		return fmt.Errorf("statfs %s: %w after %s", path, stack.ErrTimeout, timeout)
	}
	if ok && f.dead[top.Dev] {
		return fmt.Errorf("statfs %s: %w", path, syscall.ENOTCONN)
	}
	return nil
}

type fakeFS struct{ f *FakeNode }

// MkdirAll fails as the real one does on a dead FUSE mount point: stat gives ENOTCONN, so it
// tries mkdir, which fails with EEXIST.
func (x fakeFS) MkdirAll(path string, _ fs.FileMode) error {
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	if top, ok := x.f.mounts.Top(filepath.Clean(path)); ok && x.f.dead[top.Dev] {
		return &fs.PathError{Op: "mkdir", Path: path, Err: syscall.EEXIST}
	}
	return nil
}

func (x fakeFS) WriteFile(path string, data []byte, perm fs.FileMode) error {
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	x.f.files[path] = slices.Clone(data)
	x.f.modes[path] = perm
	x.f.writes[path]++
	return nil
}

func (x fakeFS) ReadFile(path string) ([]byte, error) {
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	b, ok := x.f.files[path]
	if !ok {
		return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
	}
	return slices.Clone(b), nil
}

func (x fakeFS) ReadDir(dir string) ([]string, error) {
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	// Files directly in dir, and the directories (implied by deeper files) in it.
	var names []string
	prefix := filepath.Clean(dir) + "/"
	for p := range x.f.files {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			first, _, _ := strings.Cut(rest, "/")
			names = append(names, first)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

func (x fakeFS) Remove(path string) error {
	x.f.mu.Lock()
	defer x.f.mu.Unlock()
	x.f.removed = append(x.f.removed, path)
	delete(x.f.files, path)
	delete(x.f.modes, path)
	return nil
}

// FakeProcess is a fake s3fs: it mounts its mount point on start; Kill or Crash kill the mount.
type FakeProcess struct {
	f          *FakeNode
	pid        int
	mountPoint string
	dev        string // its filesystem's device once mounted
	output     string
	done       chan struct{}
	once       sync.Once
}

type fakeProcs struct{ f *FakeNode }

func (p fakeProcs) Start(spec s3fs.ProcSpec) (s3fs.Process, error) {
	f := p.f
	if f.BeforeStart != nil {
		f.BeforeStart(spec)
	}
	if spec.NetNS != "" && f.NetNSDenied != nil && f.NetNSDenied(spec.NetNS) {
		return nil, fmt.Errorf("%w: open %s: %w", s3fs.ErrNetNS, spec.NetNS, syscall.EACCES)
	}
	path, args := spec.Path, spec.Args
	mountPoint, fsname, passwd := "", "s3fs", ""
	if len(args) > 1 {
		mountPoint = args[1]
	}
	for i := 0; i+1 < len(args); i++ {
		if args[i] != "-o" {
			continue
		}
		if v, ok := strings.CutPrefix(args[i+1], "fsname="); ok {
			fsname = v
		}
		if v, ok := strings.CutPrefix(args[i+1], "passwd_file="); ok {
			passwd = v
		}
	}
	f.mu.Lock()
	f.started = append(f.started, append([]string{path}, args...))
	f.specs = append(f.specs, spec)
	pw := f.files[passwd]
	fail := ""
	if f.S3fsFailure != nil {
		fail = f.S3fsFailure(args, pw)
	}
	proc := &FakeProcess{f: f, pid: 1000 + len(f.started), mountPoint: filepath.Clean(mountPoint), done: make(chan struct{})}
	f.procs = append(f.procs, proc)
	if fail == "" {
		f.nextDev++
		proc.dev = fmt.Sprintf("0:%d", f.nextDev)
		f.addLocked(proc.mountPoint, proc.dev, "fuse", fsname, nil)
	}
	f.mu.Unlock()
	if fail != "" {
		proc.output = fail
		proc.exit()
	}
	return proc, nil
}

// Adopt finds a running fake process by pid; its start time is its pid times 10, and its
// command line is its arguments.
func (p fakeProcs) Adopt(id s3fs.ProcID, mention string) (s3fs.Process, error) {
	f := p.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, proc := range f.procs {
		if proc.pid != id.Pid || proc.Exited() {
			continue
		}
		if proc.ID() != id || !slices.Contains(f.started[i], mention) {
			return nil, fmt.Errorf("%w: pid %d is another process", s3fs.ErrProcessGone, id.Pid)
		}
		return proc, nil
	}
	return nil, fmt.Errorf("%w: pid %d", s3fs.ErrProcessGone, id.Pid)
}

func (p *FakeProcess) exit() { p.once.Do(func() { close(p.done) }) }

// Crash kills the process: its mount stays, dead (kill -9).
func (p *FakeProcess) Crash() {
	p.f.KillMount(p.mountPoint)
	p.exit()
}

// Exited reports whether the process has ended.
func (p *FakeProcess) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Dev is the device of the filesystem it mounted ("" before).
func (p *FakeProcess) Dev() string { return p.dev }

func (p *FakeProcess) Pid() int { return p.pid }
func (p *FakeProcess) ID() s3fs.ProcID {
	return s3fs.ProcID{Pid: p.pid, StartTime: uint64(p.pid) * 10} //nolint:gosec // fake pids are small and positive
}
func (p *FakeProcess) Output() string { return p.output }
func (p *FakeProcess) Wait() error {
	<-p.done
	return fmt.Errorf("exit status 1")
}

// Kill ends the process the way SIGTERM ends s3fs: it unmounts its own mount cleanly. Like
// libfuse, it leaves the mount point alone when its connection is already gone (KillMount) or its
// mount is no longer there: the path may hold another daemon's mount by then (a new bridge).
func (p *FakeProcess) Kill(time.Duration) {
	if p.Exited() {
		return
	}
	f := p.f
	f.mu.Lock()
	if p.dev != "" && !f.dead[p.dev] {
		f.dead[p.dev] = true // binds made from it die with the daemon
		f.mounts = slices.DeleteFunc(f.mounts, func(x stack.Mount) bool { return x.Dev == p.dev && x.MountPoint == p.mountPoint })
	}
	f.mu.Unlock()
	p.exit()
}

func (f *FakeNode) isDead(dev string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dead[dev]
}
