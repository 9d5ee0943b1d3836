// Package mountreplacetest holds FakeKernel, an in-memory mount tree for mountreplace's tests and
// for the tests of its callers.
package mountreplacetest

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// Mount is one mount of the fake tree.
type Mount struct {
	ID, Parent int
	MountPoint string
	Dev, Root  string
	FSType     string
	mountreplace.Attrs
	// Group is the peer group when shared (0: not shared); Master the group it receives from.
	Group, Master int
	// Locked models a mount a less privileged user namespace inherited: never moved beneath.
	Locked bool
}

// FakeKernel implements mountreplace.Kernel over an in-memory tree. It records every instant a
// watched path is not a mount point (the bare directory showed) in Breaches.
type FakeKernel struct {
	mu       sync.Mutex
	mounts   map[int]*Mount // attached
	fds      map[int]*Mount // descriptors of trees, attached or not
	attached map[int]bool
	nextID   int
	nextFD   int
	nextGrp  int
	watch    []string

	// NoBeneath models a kernel older than 6.5: every beneath move fails with EINVAL.
	NoBeneath bool
	// Refuse lists targets where the kernel refuses beneath moves (propagation, locks).
	Refuse map[string]bool
	// BeforeDetach runs at the start of Detach, to model a mount landing on the target.
	BeforeDetach func(k *FakeKernel)
	// Breaches lists each watched path seen bare, with the call after which it was.
	Breaches []string
	// Calls lists the calls made, in order.
	Calls []string
	// tableReads counts MountInfo calls.
	tableReads int
}

// TableReads returns how many times the whole mount table was read (MountInfo).
func (k *FakeKernel) TableReads() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.tableReads
}

// NewFakeKernel returns a tree holding only "/" (mount 1, private).
func NewFakeKernel() *FakeKernel {
	k := &FakeKernel{mounts: map[int]*Mount{}, fds: map[int]*Mount{}, attached: map[int]bool{}, nextID: 1, nextFD: 100, nextGrp: 1, Refuse: map[string]bool{}}
	k.mounts[1] = &Mount{ID: 1, Parent: 1, MountPoint: "/", Dev: "0:1", Root: "/", FSType: "ext4"}
	return k
}

// Mount attaches m on top of whatever is at m.MountPoint (its ID and parent are set here) and
// returns its ID. A mount under a shared parent becomes shared, as in the kernel.
func (k *FakeKernel) Mount(m Mount) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	m.MountPoint = filepath.Clean(m.MountPoint)
	p := k.resolve(m.MountPoint)
	k.nextID++
	m.ID, m.Parent = k.nextID, p.ID
	if m.Root == "" {
		m.Root = "/"
	}
	if m.FSType == "" {
		m.FSType = "fuse.s3fs"
	}
	mm := m
	k.attach(&mm, p)
	return mm.ID
}

// MakeShared puts the mount in a peer group of its own.
func (k *FakeKernel) MakeShared(id int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.nextGrp++
	k.mounts[id].Group = k.nextGrp
}

// Watch records a breach whenever path stops being a mount point.
func (k *FakeKernel) Watch(path string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.watch = append(k.watch, filepath.Clean(path))
}

// Stack is the mounts at path, bottom first.
func (k *FakeKernel) Stack(path string) []Mount {
	k.mu.Lock()
	defer k.mu.Unlock()
	path = filepath.Clean(path)
	var out []Mount
	for cur := k.resolve(path); cur != nil && cur.MountPoint == path; cur = k.mounts[cur.Parent] {
		out = append([]Mount{*cur}, out...)
		if cur.Parent == cur.ID {
			break
		}
	}
	return out
}

// Get returns an attached mount.
func (k *FakeKernel) Get(id int) (Mount, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, ok := k.mounts[id]
	if !ok {
		return Mount{}, false
	}
	return *m, true
}

// OpenFDs is the number of tree descriptors not closed.
func (k *FakeKernel) OpenFDs() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.fds)
}

// resolve returns the top mount covering path.
func (k *FakeKernel) resolve(path string) *Mount {
	best := k.mounts[1]
	for _, m := range k.mounts {
		if m.MountPoint == path || strings.HasPrefix(path, strings.TrimSuffix(m.MountPoint, "/")+"/") {
			if len(m.MountPoint) > len(best.MountPoint) || (len(m.MountPoint) == len(best.MountPoint) && k.above(m, best)) {
				best = m
			}
		}
	}
	return best
}

// above reports whether a sits (directly or not) on b at the same mount point.
func (k *FakeKernel) above(a, b *Mount) bool {
	for cur := a; cur != nil && cur.Parent != cur.ID; cur = k.mounts[cur.Parent] {
		if cur.Parent == b.ID {
			return true
		}
		if p := k.mounts[cur.Parent]; p == nil || p.MountPoint != a.MountPoint {
			return false
		}
	}
	return false
}

func (k *FakeKernel) top(path string) (*Mount, bool) {
	m := k.resolve(path)
	return m, m.MountPoint == path
}

func (k *FakeKernel) attach(m *Mount, parent *Mount) {
	if parent.Group != 0 && m.Group == 0 {
		k.nextGrp++
		m.Group = k.nextGrp
	}
	k.mounts[m.ID] = m
	k.attached[m.ID] = true
}

func (k *FakeKernel) check(call string) {
	k.Calls = append(k.Calls, call)
	for _, w := range k.watch {
		if _, ok := k.top(w); !ok {
			k.Breaches = append(k.Breaches, fmt.Sprintf("%s bare after %s", w, call))
		}
	}
}

// MountInfo implements mountreplace.Kernel.
func (k *FakeKernel) MountInfo() (string, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.tableReads++
	ids := make([]int, 0, len(k.mounts))
	for id := range k.mounts {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	var b strings.Builder
	for _, id := range ids {
		m := k.mounts[id]
		opts := []string{"rw"}
		if m.ReadOnly {
			opts[0] = "ro"
		}
		for _, f := range []struct {
			on bool
			s  string
		}{{m.NoSuid, "nosuid"}, {m.NoDev, "nodev"}, {m.NoExec, "noexec"}} {
			if f.on {
				opts = append(opts, f.s)
			}
		}
		opts = append(opts, "relatime")
		var opt []string
		if m.Group != 0 {
			opt = append(opt, fmt.Sprintf("shared:%d", m.Group))
		}
		if m.Master != 0 {
			opt = append(opt, fmt.Sprintf("master:%d", m.Master))
		}
		fields := append([]string{fmt.Sprint(m.ID), fmt.Sprint(m.Parent), m.Dev, m.Root, m.MountPoint, strings.Join(opts, ",")}, opt...)
		b.WriteString(strings.Join(append(fields, "-", m.FSType, "src", "rw"), " ") + "\n")
	}
	return b.String(), nil
}

// TopID implements mountreplace.Kernel.
func (k *FakeKernel) TopID(path string) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.resolve(filepath.Clean(path)).ID, nil
}

// Clone implements mountreplace.Kernel: a detached copy of the top at path, a peer of it when
// it is shared.
func (k *FakeKernel) Clone(path string) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	src, ok := k.top(filepath.Clean(path))
	if !ok {
		return -1, fmt.Errorf("fake open_tree %s: %w", path, syscall.EINVAL)
	}
	k.nextID++
	k.nextFD++
	c := *src
	c.ID, c.Parent, c.MountPoint, c.Locked = k.nextID, 0, "", false
	k.fds[k.nextFD] = &c
	k.Calls = append(k.Calls, "clone "+path)
	return k.nextFD, nil
}

func (k *FakeKernel) tree(fd int) (*Mount, error) {
	m, ok := k.fds[fd]
	if !ok {
		return nil, fmt.Errorf("fake tree %d: %w", fd, syscall.EBADF)
	}
	return m, nil
}

// TreeID implements mountreplace.Kernel.
func (k *FakeKernel) TreeID(fd int) (int, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, err := k.tree(fd)
	if err != nil {
		return 0, err
	}
	return m.ID, nil
}

// SetAttrs implements mountreplace.Kernel.
func (k *FakeKernel) SetAttrs(fd int, a mountreplace.Attrs) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, err := k.tree(fd)
	if err != nil {
		return err
	}
	if k.attached[m.ID] {
		return fmt.Errorf("fake SetAttrs on attached mount %d: %w", m.ID, syscall.EINVAL)
	}
	m.ReadOnly, m.NoSuid, m.NoDev, m.NoExec = a.ReadOnly, a.NoSuid, a.NoDev, a.NoExec
	if a.Slave {
		if m.Group != 0 {
			m.Master, m.Group = m.Group, 0
		}
	} else {
		m.Master, m.Group = 0, 0
	}
	m.Slave = m.Master != 0
	k.Calls = append(k.Calls, fmt.Sprintf("setattr %d %+v", m.ID, a))
	return nil
}

// SetPropagation implements mountreplace.Kernel.
func (k *FakeKernel) SetPropagation(fd int, p mountreplace.Propagation) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	m, err := k.tree(fd)
	if err != nil {
		return err
	}
	if !p.Slave {
		m.Master = 0
	} else if m.Master == 0 && m.Group != 0 {
		m.Master = m.Group
		m.Group = 0
	}
	if p.Shared && m.Group == 0 {
		k.nextGrp++
		m.Group = k.nextGrp
	} else if !p.Shared {
		m.Group = 0
	}
	m.Slave = m.Master != 0
	k.check(fmt.Sprintf("propagation %d %s", m.ID, p))
	return nil
}

func (k *FakeKernel) move(fd int, path string, top int, beneath bool) error {
	m, err := k.tree(fd)
	if err != nil {
		return err
	}
	if k.attached[m.ID] {
		return fmt.Errorf("fake move of attached mount %d: %w", m.ID, syscall.EINVAL)
	}
	path = filepath.Clean(path)
	t, ok := k.top(path)
	if !ok || t.ID != top {
		return fmt.Errorf("%w: fake top of %s is %d, want %d", mountreplace.ErrTargetChanged, path, t.ID, top)
	}
	m.MountPoint = path
	if !beneath {
		m.Parent = t.ID
		k.attach(m, t)
		return nil
	}
	if k.NoBeneath || k.Refuse[path] || t.Locked {
		return fmt.Errorf("%w: fake move_mount: %w", mountreplace.ErrRefused, syscall.EINVAL)
	}
	parent := k.mounts[t.Parent]
	m.Parent = t.Parent
	t.Parent = m.ID
	k.attach(m, parent)
	return nil
}

// MoveBeneath implements mountreplace.Kernel.
func (k *FakeKernel) MoveBeneath(fd int, path string, top int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.move(fd, path, top, true)
	k.check(fmt.Sprintf("beneath %s", path))
	return err
}

// MoveOnTop implements mountreplace.Kernel.
func (k *FakeKernel) MoveOnTop(fd int, path string, top int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	err := k.move(fd, path, top, false)
	k.check(fmt.Sprintf("ontop %s", path))
	return err
}

// Detach implements mountreplace.Kernel: the top at path and everything on it go.
func (k *FakeKernel) Detach(path string, top int) error {
	if k.BeforeDetach != nil {
		k.BeforeDetach(k)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	path = filepath.Clean(path)
	t, ok := k.top(path)
	if !ok || t.ID != top {
		k.check("detach refused " + path)
		return fmt.Errorf("%w: fake top of %s is %d, want %d", mountreplace.ErrTargetChanged, path, t.ID, top)
	}
	if t.Locked {
		return fmt.Errorf("fake umount2 %s: %w", path, syscall.EINVAL)
	}
	k.drop(t.ID)
	k.check("detach " + path)
	return nil
}

func (k *FakeKernel) drop(id int) {
	for cid, c := range k.mounts {
		if c.Parent == id && cid != id {
			k.drop(cid)
		}
	}
	delete(k.mounts, id)
	delete(k.attached, id)
}

// MakeReadOnly makes the top mount at path, which must be top, read-only in place.
func (k *FakeKernel) MakeReadOnly(path string, top int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	path = filepath.Clean(path)
	t, ok := k.top(path)
	if !ok || t.ID != top {
		return fmt.Errorf("%w: fake top of %s is %d, want %d", mountreplace.ErrTargetChanged, path, t.ID, top)
	}
	t.ReadOnly = true
	k.check("read-only " + path)
	return nil
}

// Close implements mountreplace.Kernel.
func (k *FakeKernel) Close(fd int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.fds[fd]; !ok {
		return fmt.Errorf("fake close %d: %w", fd, syscall.EBADF)
	}
	delete(k.fds, fd)
	return nil
}

var _ mountreplace.Kernel = (*FakeKernel)(nil)

// Placer is a FakeKernel that also implements mountreplace.Placer: where two mounts sit, read
// from the tree as statmount reads one mount, with no mountinfo. Unsupported models a kernel
// without statmount (ErrNoPlacement: the caller reads the table).
type Placer struct {
	*FakeKernel
	Unsupported bool
}

// Placements implements mountreplace.Placer.
func (p Placer) Placements(tree int, target string) (mountreplace.Placement, mountreplace.Placement, error) {
	if p.Unsupported {
		return mountreplace.Placement{}, mountreplace.Placement{}, fmt.Errorf("%w: fake kernel without statmount", mountreplace.ErrNoPlacement)
	}
	k := p.FakeKernel
	k.mu.Lock()
	defer k.mu.Unlock()
	m, err := k.tree(tree)
	if err != nil {
		return mountreplace.Placement{}, mountreplace.Placement{}, err
	}
	if !k.attached[m.ID] {
		return mountreplace.Placement{}, mountreplace.Placement{}, fmt.Errorf("fake statmount of detached mount %d: %w", m.ID, syscall.ENOENT)
	}
	top, ok := k.top(filepath.Clean(target))
	if !ok {
		return mountreplace.Placement{}, mountreplace.Placement{}, fmt.Errorf("fake statx %s: %w", target, syscall.ENOENT)
	}
	return placement(m), placement(top), nil
}

func placement(m *Mount) mountreplace.Placement {
	return mountreplace.Placement{ID: m.ID, ParentID: m.Parent, MountPoint: m.MountPoint,
		Propagation: mountreplace.Propagation{Shared: m.Group != 0, Slave: m.Master != 0}}
}

var _ mountreplace.Placer = Placer{}
