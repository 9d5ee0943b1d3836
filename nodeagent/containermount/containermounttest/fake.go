// Package containermounttest holds FakeNode, an in-memory node for the tests of containermount
// and of its callers, and helpers for tests whose stand-in containers run without kubelet.
package containermounttest

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

// Mount and MountTable are containermount's.
type (
	Mount      = containermount.Mount
	MountTable = containermount.MountTable
)

// FakeNode is an in-memory node for unit tests: processes with cgroups and namespaces, one mount
// table per mount namespace, and AttachInNamespace carried out on those tables by
// containermount.Place — the real replacement logic (mountreplace.Replacer) — over a kernel
// that models the mount calls on the table of the namespace entered. It records every breach of
// the remounter's safety rules in Violations: entering the agent's own or the host's namespace,
// a source path leaving the live mount, and any instant a replaced mount point shows the bare
// directory (no mount at the path).
type FakeNode struct {
	mu      sync.Mutex
	SelfPid int
	procs   map[int]FakeProc
	tables  map[uint64]MountTable
	nextID  int
	nextGrp int
	// NoBeneath models a kernel older than 6.5: the start-up probe found no MOVE_MOUNT_BENEATH.
	NoBeneath bool
	// Refuse makes the kernel refuse a beneath move at that container path (EINVAL).
	Refuse map[string]bool
	// FailSetns makes entering that namespace fail with the error.
	FailSetns map[uint64]error
	// FailAttach makes the attach at that container path fail with the error.
	FailAttach map[string]error
	// Calls records every AttachInNamespace call.
	Calls []FakeCall
	// Violations records every breach of a safety rule.
	Violations []string
}

// FakeProc is one fake process.
type FakeProc struct {
	Cgroup  string
	MountNS uint64
	UserNS  uint64
	// PPid and StartTime are /proc/<pid>/stat's (zero: a tie the lowest pid wins).
	PPid      int
	StartTime uint64
	// MountNSOwner owns MountNS (0: UserNS, as for every namespace a runtime makes);
	// UserNSParent is UserNS's parent (0: the initial user namespace).
	MountNSOwner, UserNSParent uint64
}

func (p FakeProc) owner() uint64 {
	if p.MountNSOwner != 0 {
		return p.MountNSOwner
	}
	return p.UserNS
}

// FakeCall is one recorded AttachInNamespace call and what it did.
type FakeCall struct {
	NS       uint64
	LivePath string
	Attaches []containermount.Attach
	Outcomes []containermount.Outcome
}

// NewFakeNode returns a node whose agent is selfPid; add processes and tables before use.
func NewFakeNode(selfPid int) *FakeNode {
	return &FakeNode{SelfPid: selfPid, procs: map[int]FakeProc{}, tables: map[uint64]MountTable{},
		nextID: 10000, nextGrp: 1000, Refuse: map[string]bool{}, FailSetns: map[uint64]error{}, FailAttach: map[string]error{}}
}

// OS returns the seam backed by this node.
func (f *FakeNode) OS() containermount.OS {
	return containermount.OS{Proc: fakeProc{f}, NS: fakeNS{f}}
}

// AddProc adds (or replaces) a process.
func (f *FakeNode) AddProc(pid int, p FakeProc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs[pid] = p
}

// RemoveProc makes a process exit.
func (f *FakeNode) RemoveProc(pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.procs, pid)
}

// SetTable sets the mount table of a namespace from mountinfo text.
func (f *FakeNode) SetTable(ns uint64, mountinfo string) error {
	t, err := containermount.ParseMountInfo(mountinfo)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[ns] = t
	return nil
}

// Table returns a copy of a namespace's mount table.
func (f *FakeNode) Table(ns uint64) MountTable {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.tables[ns])
}

func (f *FakeNode) violate(format string, args ...any) {
	f.Violations = append(f.Violations, fmt.Sprintf(format, args...))
}

type fakeProc struct{ f *FakeNode }

func (p fakeProc) Self() int { return p.f.SelfPid }

func (p fakeProc) Pids() ([]int, error) {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	out := make([]int, 0, len(p.f.procs))
	for pid := range p.f.procs {
		out = append(out, pid)
	}
	sort.Ints(out)
	return out, nil
}

func (p fakeProc) get(pid int) (FakeProc, error) {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	pr, ok := p.f.procs[pid]
	if !ok {
		return FakeProc{}, fmt.Errorf("/proc/%d: no such process", pid)
	}
	return pr, nil
}

func (p fakeProc) Cgroup(pid int) (string, error) {
	pr, err := p.get(pid)
	return pr.Cgroup, err
}

func (p fakeProc) MountInfo(pid int) (string, error) {
	pr, err := p.get(pid)
	if err != nil {
		return "", err
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	return FormatMountInfo(p.f.tables[pr.MountNS]), nil
}

func (p fakeProc) MountNS(pid int) (uint64, error) {
	pr, err := p.get(pid)
	return pr.MountNS, err
}

func (p fakeProc) UserNS(pid int) (uint64, error) {
	pr, err := p.get(pid)
	return pr.UserNS, err
}

func (p fakeProc) Stat(pid int) (containermount.ProcStat, error) {
	pr, err := p.get(pid)
	return containermount.ProcStat{PPid: pr.PPid, StartTime: pr.StartTime}, err
}

func (p fakeProc) MountNSOwner(pid int) (uint64, uint64, error) {
	pr, err := p.get(pid)
	return pr.MountNS, pr.owner(), err
}

func (p fakeProc) UserNSParent(pid int) (uint64, uint64, error) {
	pr, err := p.get(pid)
	return pr.UserNS, pr.UserNSParent, err
}

type fakeNS struct{ f *FakeNode }

func (n fakeNS) AttachInNamespace(ctx context.Context, ref containermount.NamespaceRef, livePath string, attaches []containermount.Attach) ([]containermount.Outcome, error) {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls = append(f.Calls, FakeCall{NS: ref.Inode, LivePath: livePath, Attaches: slices.Clone(attaches)})
	call := &f.Calls[len(f.Calls)-1]
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	self := f.procs[f.SelfPid]
	live, ok := f.tables[self.MountNS].Top(livePath)
	if !ok {
		return nil, fmt.Errorf("%w: nothing at %s", containermount.ErrSource, livePath)
	}
	if ref.Inode == self.MountNS || ref.Inode == f.procs[1].MountNS {
		f.violate("entered the agent's own or the host's mount namespace %d", ref.Inode)
	}
	entered := false
	for _, pid := range ref.Pids {
		if p, ok := f.procs[pid]; ok && p.MountNS == ref.Inode {
			entered = true
			if ref.Owner == 0 || p.owner() != ref.Owner {
				return nil, fmt.Errorf("%w: mount namespace %d is owned by %d, want %d", containermount.ErrNotRuntimeNamespace, ref.Inode, p.owner(), ref.Owner)
			}
			break
		}
	}
	if !entered {
		return nil, fmt.Errorf("%w: %d", containermount.ErrNamespaceGone, ref.Inode)
	}
	if err := f.FailSetns[ref.Inode]; err != nil {
		return nil, fmt.Errorf("%w: %w", containermount.ErrSetns, err)
	}
	k := &kernel{f: f, ns: ref.Inode, trees: map[int]*Mount{}}
	out := make([]containermount.Outcome, len(attaches))
	trees := make([]int, len(attaches))
	for i, a := range attaches {
		if a.Protect {
			continue
		}
		if path.IsAbs(a.Offset) || a.Offset != path.Clean("/" + a.Offset)[1:] || strings.HasPrefix(a.Offset, "..") {
			f.violate("offset %q leaves the live mount", a.Offset)
			out[i].Err = fmt.Errorf("%w: offset %q", containermount.ErrSource, a.Offset)
			continue
		}
		if err := f.FailAttach[a.Target]; err != nil {
			out[i].Err = fmt.Errorf("%w: %w", containermount.ErrAttach, err)
			continue
		}
		// open_tree of the live mount at the offset, in the agent's namespace: a peer of it.
		f.nextID++
		k.nextFD++
		k.trees[k.nextFD] = &Mount{ID: f.nextID, Dev: live.Dev, Root: path.Join(live.Root, a.Offset),
			Options: slices.Clone(live.Options), Optional: slices.Clone(live.Optional), FSType: live.FSType, Source: live.Source}
		trees[i] = k.nextFD
		if !a.Nest {
			k.watch = append(k.watch, a.Target)
		}
	}
	containermount.Place(k, mountreplace.Support{Beneath: !f.NoBeneath}, trees, attaches, out)
	call.Outcomes = slices.Clone(out)
	return out, nil
}

// kernel models the mount calls in namespace ns of f (f.mu held).
type kernel struct {
	f      *FakeNode
	ns     uint64
	trees  map[int]*Mount
	nextFD int
	watch  []string
}

var _ containermount.Kernel = (*kernel)(nil)

func (k *kernel) table() MountTable { return k.f.tables[k.ns] }

// check records a violation for every replaced mount point a lookup no longer finds a mount at.
func (k *kernel) check(call string) {
	for _, w := range k.watch {
		if m, ok := k.table().Reach(w); !ok || m.MountPoint != w {
			k.f.violate("%s bare in namespace %d after %s", w, k.ns, call)
		}
	}
}

func (k *kernel) MountInfo() (string, error) { return FormatMountInfo(k.table()), nil }

func (k *kernel) TopID(p string) (int, error) {
	m, ok := k.table().Reach(p)
	if !ok {
		return 0, syscall.ENOENT
	}
	return m.ID, nil
}

func (k *kernel) Clone(string) (int, error) {
	return -1, fmt.Errorf("fake: clones are made before entering the namespace: %w", syscall.EINVAL)
}

func (k *kernel) tree(fd int) (*Mount, error) {
	m, ok := k.trees[fd]
	if !ok {
		return nil, fmt.Errorf("fake tree %d: %w", fd, syscall.EBADF)
	}
	return m, nil
}

func (k *kernel) TreeID(fd int) (int, error) {
	m, err := k.tree(fd)
	if err != nil {
		return 0, err
	}
	return m.ID, nil
}

func group(m Mount, tag string) int {
	for _, o := range m.Optional {
		if v, ok := strings.CutPrefix(o, tag+":"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

func optional(shared, master int) []string {
	var out []string
	if shared != 0 {
		out = append(out, "shared:"+strconv.Itoa(shared))
	}
	if master != 0 {
		out = append(out, "master:"+strconv.Itoa(master))
	}
	return out
}

func (k *kernel) SetAttrs(fd int, a mountreplace.Attrs) error {
	m, err := k.tree(fd)
	if err != nil {
		return err
	}
	if m.MountPoint != "" {
		return fmt.Errorf("fake SetAttrs on attached mount %d: %w", m.ID, syscall.EINVAL)
	}
	opts := []string{"rw"}
	if a.ReadOnly {
		opts[0] = "ro"
	}
	for _, o := range []struct {
		on   bool
		name string
	}{{a.NoSuid, "nosuid"}, {a.NoDev, "nodev"}, {a.NoExec, "noexec"}} {
		if o.on {
			opts = append(opts, o.name)
		}
	}
	m.Options = opts
	master := 0
	if a.Slave { // a slave of the group it is a peer of (or stays a slave of its master)
		master = group(*m, "shared")
		if master == 0 {
			master = group(*m, "master")
		}
	}
	m.Optional = optional(0, master)
	return nil
}

func (k *kernel) attached(fd int) (int, error) {
	m, err := k.tree(fd)
	if err != nil {
		return -1, err
	}
	for i, t := range k.table() {
		if t.ID == m.ID {
			return i, nil
		}
	}
	return -1, fmt.Errorf("fake: mount %d not attached: %w", m.ID, syscall.EINVAL)
}

func (k *kernel) SetPropagation(fd int, p mountreplace.Propagation) error {
	i, err := k.attached(fd)
	if err != nil {
		return err
	}
	t := k.table()
	m := t[i]
	master, shared := group(m, "master"), group(m, "shared")
	if p.Slave && master == 0 {
		master, shared = shared, 0
	}
	if !p.Slave {
		master = 0
	}
	if !p.Shared {
		shared = 0
	} else if shared == 0 {
		k.f.nextGrp++
		shared = k.f.nextGrp
	}
	t[i].Optional = optional(shared, master)
	k.check("propagation")
	return nil
}

// at checks that a lookup of p reaches mount top; onPoint: top must be mounted at p itself.
func (k *kernel) at(p string, top int, onPoint bool) (Mount, error) {
	m, ok := k.table().Reach(p)
	if !ok || m.ID != top || (onPoint && m.MountPoint != p) {
		return Mount{}, fmt.Errorf("%w: fake top of %s is %d, want %d", mountreplace.ErrTargetChanged, p, m.ID, top)
	}
	return m, nil
}

func (k *kernel) attach(fd int, p string, parent Mount) {
	m := k.trees[fd]
	m.ParentID, m.MountPoint = parent.ID, p
	if group(parent, "shared") != 0 && group(*m, "shared") == 0 { // under a shared parent it becomes shared
		k.f.nextGrp++
		m.Optional = optional(k.f.nextGrp, group(*m, "master"))
	}
	k.f.tables[k.ns] = append(k.table(), *m)
}

func (k *kernel) byID(id int) (Mount, bool) {
	for _, m := range k.table() {
		if m.ID == id {
			return m, true
		}
	}
	return Mount{}, false
}

func (k *kernel) MoveBeneath(fd int, p string, top int) error {
	if _, err := k.tree(fd); err != nil {
		return err
	}
	old, err := k.at(p, top, true)
	if err != nil {
		return err
	}
	if k.f.NoBeneath || k.f.Refuse[p] {
		return fmt.Errorf("%w: fake move_mount beneath %s: %w", mountreplace.ErrRefused, p, syscall.EINVAL)
	}
	parent, _ := k.byID(old.ParentID)
	k.attach(fd, p, parent)
	t := k.table()
	for i := range t {
		if t[i].ID == old.ID {
			t[i].ParentID = k.trees[fd].ID
		}
	}
	k.check("beneath " + p)
	return nil
}

func (k *kernel) MoveOnTop(fd int, p string, top int) error {
	if _, err := k.tree(fd); err != nil {
		return err
	}
	parent, err := k.at(p, top, false)
	if err != nil {
		return err
	}
	k.attach(fd, p, parent)
	k.check("on top " + p)
	return nil
}

func (k *kernel) Detach(p string, top int) error {
	if _, err := k.at(p, top, true); err != nil {
		return err
	}
	gone := map[int]bool{top: true}
	for changed := true; changed; {
		changed = false
		for _, m := range k.table() {
			if !gone[m.ID] && gone[m.ParentID] {
				gone[m.ID], changed = true, true
			}
		}
	}
	k.f.tables[k.ns] = slices.DeleteFunc(slices.Clone(k.table()), func(m Mount) bool { return gone[m.ID] })
	k.check("detach " + p)
	return nil
}

func (k *kernel) MakeReadOnly(p string, top int) error {
	m, err := k.at(p, top, false)
	if err != nil {
		return err
	}
	t := slices.Clone(k.table())
	for i := range t {
		if t[i].ID != m.ID {
			continue
		}
		opts := []string{"ro"}
		for _, o := range t[i].Options {
			if o != "rw" && o != "ro" {
				opts = append(opts, o)
			}
		}
		t[i].Options = opts
	}
	k.f.tables[k.ns] = t
	return nil
}

func (k *kernel) Close(fd int) error {
	if _, ok := k.trees[fd]; !ok {
		return fmt.Errorf("fake close %d: %w", fd, syscall.EBADF)
	}
	return nil
}

// FormatMountInfo renders a table in the mountinfo format (the inverse of ParseMountInfo).
func FormatMountInfo(t MountTable) string {
	var b strings.Builder
	for _, m := range t {
		fields := []string{strconv.Itoa(m.ID), strconv.Itoa(m.ParentID), m.Dev, escapeOctal(m.Root),
			escapeOctal(m.MountPoint), strings.Join(m.Options, ",")}
		fields = append(fields, m.Optional...)
		fields = append(fields, "-", m.FSType, escapeOctal(m.Source), "rw")
		b.WriteString(strings.Join(fields, " "))
		b.WriteByte('\n')
	}
	return b.String()
}

func escapeOctal(s string) string {
	r := strings.NewReplacer(" ", `\040`, "\t", `\011`, "\n", `\012`, `\`, `\134`)
	return r.Replace(s)
}

// CgroupProcFS is a ProcFS whose Cgroup answers from Cgroups for the pids listed there and
// passes everything else to the ProcFS it wraps (normally RealProcFS). Node tests and hack/bench
// use it: their stand-in container processes cannot join a kubepods cgroup without kubelet.
type CgroupProcFS struct {
	containermount.ProcFS
	Cgroups map[int]string
}

// Cgroup implements ProcFS.
func (p CgroupProcFS) Cgroup(pid int) (string, error) {
	if cg, ok := p.Cgroups[pid]; ok {
		return cg, nil
	}
	return p.ProcFS.Cgroup(pid)
}

// PodCgroup is the /proc/<pid>/cgroup content of a process of container containerID of pod
// podUID under kubelet's cgroupfs layout (cgroup v1, burstable).
func PodCgroup(podUID, containerID string) string {
	return "12:memory:/kubepods/burstable/pod" + podUID + "/" + containerID + "\n"
}
