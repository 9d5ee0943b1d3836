package containermount

import (
	"context"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// FakeNode is an in-memory node for unit tests: processes with cgroups and namespaces, one mount
// table per mount namespace, and the attach call applied to those tables the way the kernel
// would. It records every attach and every breach of the remounter's safety rules (entering the
// agent's own or the host's namespace, attaching where the planned dead mount is not on top,
// a source path leaving the live mount) in Violations.
type FakeNode struct {
	mu      sync.Mutex
	SelfPid int
	procs   map[int]FakeProc
	tables  map[uint64]MountTable
	nextID  int
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
}

// FakeCall is one recorded AttachInNamespace call.
type FakeCall struct {
	NS       uint64
	LivePath string
	Attaches []Attach
}

// NewFakeNode returns a node whose agent is selfPid; add processes and tables before use.
func NewFakeNode(selfPid int) *FakeNode {
	return &FakeNode{SelfPid: selfPid, procs: map[int]FakeProc{}, tables: map[uint64]MountTable{},
		nextID: 10000, FailSetns: map[uint64]error{}, FailAttach: map[string]error{}}
}

// OS returns the seam backed by this node.
func (f *FakeNode) OS() OS { return OS{Proc: fakeProc{f}, NS: fakeNS{f}} }

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
	t, err := ParseMountInfo(mountinfo)
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
	return append(MountTable(nil), f.tables[ns]...)
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

type fakeNS struct{ f *FakeNode }

func (n fakeNS) AttachInNamespace(ctx context.Context, ref NamespaceRef, livePath string, attaches []Attach) ([]error, error) {
	f := n.f
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Calls = append(f.Calls, FakeCall{NS: ref.Inode, LivePath: livePath, Attaches: append([]Attach(nil), attaches...)})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	self := f.procs[f.SelfPid]
	live, ok := f.tables[self.MountNS].Top(livePath)
	if !ok {
		return nil, fmt.Errorf("%w: nothing at %s", ErrSource, livePath)
	}
	if ref.Inode == self.MountNS || ref.Inode == f.procs[1].MountNS {
		f.violate("entered the agent's own or the host's mount namespace %d", ref.Inode)
	}
	entered := false
	for _, pid := range ref.Pids {
		if p, ok := f.procs[pid]; ok && p.MountNS == ref.Inode {
			entered = true
			break
		}
	}
	if !entered {
		return nil, fmt.Errorf("%w: %d", ErrNamespaceGone, ref.Inode)
	}
	if err := f.FailSetns[ref.Inode]; err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSetns, err)
	}
	errs := make([]error, len(attaches))
	table := f.tables[ref.Inode]
	for i, a := range attaches {
		if path.IsAbs(a.Offset) || a.Offset != path.Clean("/" + a.Offset)[1:] || strings.HasPrefix(a.Offset, "..") {
			f.violate("offset %q leaves the live mount", a.Offset)
			errs[i] = fmt.Errorf("%w: offset %q", ErrSource, a.Offset)
			continue
		}
		if err := f.FailAttach[a.Target]; err != nil {
			errs[i] = fmt.Errorf("%w: %w", ErrAttach, err)
			continue
		}
		top, ok := table.Reach(a.Target) // what the kernel's lookup of the path reaches
		if !ok || top.ID != a.ExpectMountID {
			errs[i] = fmt.Errorf("%w: %s", ErrTargetChanged, a.Target)
			continue
		}
		if a.Protect {
			if top.Dev != live.Dev {
				f.violate("made mount %d at %s read-only: it is not the live connection", top.ID, a.Target)
			}
			table = setReadOnly(table, top.ID)
			continue
		}
		opts := []string{"rw"}
		if a.ReadOnly || live.ReadOnly() { // flags are only added to the clone of the live mount
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
		var optional []string
		if a.Slave {
			optional = []string{"master:1"}
		}
		f.nextID++
		table = append(table, Mount{ID: f.nextID, ParentID: top.ID, Dev: live.Dev,
			Root: path.Join(live.Root, a.Offset), MountPoint: a.Target, Options: opts, Optional: optional,
			FSType: live.FSType, Source: live.Source})
	}
	f.tables[ref.Inode] = table
	return errs, nil
}

// setReadOnly returns table with mount id read-only (a copy: tables handed out stay unchanged).
func setReadOnly(table MountTable, id int) MountTable {
	out := append(MountTable(nil), table...)
	for i, m := range out {
		if m.ID != id {
			continue
		}
		opts := []string{"ro"}
		for _, o := range m.Options {
			if o != "rw" && o != "ro" {
				opts = append(opts, o)
			}
		}
		out[i].Options = opts
	}
	return out
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
	ProcFS
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
