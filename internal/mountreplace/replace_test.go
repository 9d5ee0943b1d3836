package mountreplace_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/mountreplace/mountreplacetest"
)

const (
	kubelet = "/var/lib/kubelet"
	target  = kubelet + "/pods/uid/volumes/kubernetes.io~csi/pv1/mount"
	fresh   = "/var/lib/pvrescue/s3/replay/pv1/uid"
)

// node is a kubelet-like layout: a shared kubelet directory, the driver's (dead) FUSE mount at a
// pod's target, and a live mount of a new connection at a fresh directory.
func node(t *testing.T, dead mountreplace.Attrs) (*mountreplacetest.FakeKernel, int) {
	t.Helper()
	k := mountreplacetest.NewFakeKernel()
	k.MakeShared(k.Mount(mountreplacetest.Mount{MountPoint: kubelet, Dev: "8:1", FSType: "ext4"}))
	old := k.Mount(mountreplacetest.Mount{MountPoint: target, Dev: "0:50", Attrs: dead})
	k.Mount(mountreplacetest.Mount{MountPoint: fresh, Dev: "0:51", Attrs: mountreplace.Attrs{NoSuid: true, NoDev: true}})
	k.Watch(target)
	return k, old
}

func replacer(k *mountreplacetest.FakeKernel, beneath bool) mountreplace.Replacer {
	s := mountreplace.Support{Beneath: beneath}
	if !beneath {
		s.Err = errors.New("EINVAL (Linux < 6.5)")
	}
	return mountreplace.Replacer{Kernel: k, Support: s}
}

func TestReplaceBeneath(t *testing.T) {
	dead := mountreplace.Attrs{ReadOnly: true, NoSuid: true, NoDev: true}
	k, old := node(t, dead)
	res, err := replacer(k, true).Replace(mountreplace.Request{Target: target, Old: old, LivePath: fresh})
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != mountreplace.Beneath || res.Reason != "" || res.Old != old || res.New == 0 {
		t.Fatalf("result %+v; want beneath, old %d replaced", res, old)
	}
	s := k.Stack(target)
	if len(s) != 1 || s[0].ID != res.New || s[0].Dev != "0:51" {
		t.Fatalf("stack at target = %+v; want only the new mount %d of 0:51", s, res.New)
	}
	if _, ok := k.Get(old); ok {
		t.Errorf("old mount %d still attached", old)
	}
	// Flags exactly the dead mount's (read-only added to the live one's), shared under the
	// shared kubelet directory as the dead one was, and never the bare directory.
	if got := s[0].Attrs; got.ReadOnly != true || !got.NoSuid || !got.NoDev || got.NoExec {
		t.Errorf("new mount flags %+v, want %+v", got, dead)
	}
	if s[0].Group == 0 || res.Propagation != (mountreplace.Propagation{Shared: true}) {
		t.Errorf("new mount not shared under the shared kubelet directory: %+v, result %s", s[0], res.Propagation)
	}
	if len(k.Breaches) != 0 {
		t.Errorf("bare directory seen: %v", k.Breaches)
	}
	if k.OpenFDs() != 0 {
		t.Errorf("%d clone descriptors left open", k.OpenFDs())
	}
}

func TestReplaceFiftyDeathsKeepsDepthOne(t *testing.T) {
	k, old := node(t, mountreplace.Attrs{NoSuid: true, NoDev: true})
	r := replacer(k, true)
	for i := range 50 {
		live := fmt.Sprintf("/var/lib/pvrescue/s3/replay/pv1/%d", i)
		k.Mount(mountreplacetest.Mount{MountPoint: live, Dev: fmt.Sprintf("0:%d", 100+i)})
		res, err := r.Replace(mountreplace.Request{Target: target, Old: old, LivePath: live})
		if err != nil || res.Mode != mountreplace.Beneath {
			t.Fatalf("replacement %d: %+v, %v", i, res, err)
		}
		old = res.New
	}
	if s := k.Stack(target); len(s) != 1 || s[0].Dev != "0:149" {
		t.Errorf("after 50 replacements the stack is %+v; want one mount of the last connection", s)
	}
	if len(k.Breaches) != 0 {
		t.Errorf("bare directory seen: %v", k.Breaches)
	}
}

// A container's mount that received propagation (HostToContainer) gets a slave clone; one under
// a private parent (None, subPath) a private one.
func TestReplaceKeepsPropagationInContainer(t *testing.T) {
	for _, tc := range []struct {
		name string
		dead mountreplace.Attrs
		want mountreplace.Propagation
	}{
		{"hostToContainer", mountreplace.Attrs{Slave: true}, mountreplace.Propagation{Slave: true}},
		{"none", mountreplace.Attrs{}, mountreplace.Propagation{}},
		{"subPath read-only", mountreplace.Attrs{ReadOnly: true}, mountreplace.Propagation{}},
		// The host's dead mount was detached first: its group emptied, the container's slave
		// turned private; the caller knows the pod asked for HostToContainer.
		{"hostToContainer orphaned", mountreplace.Attrs{}, mountreplace.Propagation{Slave: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := mountreplacetest.NewFakeKernel()
			live := k.Mount(mountreplacetest.Mount{MountPoint: target, Dev: "0:60"})
			k.MakeShared(live)
			k.Mount(mountreplacetest.Mount{MountPoint: "/ctr", Dev: "0:30", FSType: "overlay"})
			dm := mountreplacetest.Mount{MountPoint: "/ctr/data", Dev: "0:50", Attrs: tc.dead}
			if tc.dead.Slave {
				dm.Master = 99
			}
			old := k.Mount(dm)
			k.Watch("/ctr/data")
			res, err := replacer(k, true).Replace(mountreplace.Request{Target: "/ctr/data", Old: old, LivePath: target,
				Add: mountreplace.Attrs{Slave: tc.want.Slave}})
			if err != nil {
				t.Fatal(err)
			}
			s := k.Stack("/ctr/data")
			if res.Mode != mountreplace.Beneath || len(s) != 1 || s[0].Dev != "0:60" {
				t.Fatalf("result %+v, stack %+v", res, s)
			}
			if res.Propagation != tc.want || s[0].ReadOnly != tc.dead.ReadOnly {
				t.Errorf("new mount %+v (%s), want %s, read-only %v", s[0], res.Propagation, tc.want, tc.dead.ReadOnly)
			}
			if tc.want.Slave && s[0].Master == 0 {
				t.Errorf("HostToContainer mount is not a slave of the live mount's group: %+v", s[0])
			}
			if len(k.Breaches) != 0 {
				t.Errorf("bare directory seen: %v", k.Breaches)
			}
		})
	}
}

func TestReplaceFallsBackToStacking(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(k *mountreplacetest.FakeKernel, old int)
		probe  bool
		reason string
	}{
		{"kernel older than 6.5", func(*mountreplacetest.FakeKernel, int) {}, false, mountreplace.ReasonUnsupported},
		{"kernel refuses at this target", func(k *mountreplacetest.FakeKernel, _ int) { k.Refuse[target] = true }, true, mountreplace.ReasonRefused},
		{"old mount has submounts", func(k *mountreplacetest.FakeKernel, _ int) {
			k.Mount(mountreplacetest.Mount{MountPoint: target + "/logs", Dev: "0:52"})
		}, true, mountreplace.ReasonSubmounts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, old := node(t, mountreplace.Attrs{NoSuid: true})
			tc.setup(k, old)
			res, err := replacer(k, tc.probe).Replace(mountreplace.Request{Target: target, Old: old, LivePath: fresh})
			if err != nil {
				t.Fatal(err)
			}
			if res.Mode != mountreplace.Stacked || res.Reason != tc.reason {
				t.Fatalf("result %+v; want stacked, reason %q", res, tc.reason)
			}
			if tc.reason == mountreplace.ReasonRefused && !errors.Is(res.Refusal, mountreplace.ErrRefused) {
				t.Errorf("refusal %v does not wrap ErrRefused", res.Refusal)
			}
			s := k.Stack(target)
			if len(s) != 2 || s[0].ID != old || s[1].ID != res.New {
				t.Errorf("stack %+v; want the old mount %d with the new %d on top", s, old, res.New)
			}
			if len(k.Breaches) != 0 {
				t.Errorf("bare directory seen: %v", k.Breaches)
			}
		})
	}
}

func TestReplaceLeavesChangedTargetsAlone(t *testing.T) {
	t.Run("top is not the planned mount", func(t *testing.T) {
		k, old := node(t, mountreplace.Attrs{})
		other := k.Mount(mountreplacetest.Mount{MountPoint: target, Dev: "0:77"})
		_, err := replacer(k, true).Replace(mountreplace.Request{Target: target, Old: old, LivePath: fresh})
		if !errors.Is(err, mountreplace.ErrTargetChanged) {
			t.Fatalf("err = %v, want ErrTargetChanged", err)
		}
		if s := k.Stack(target); len(s) != 2 || s[1].ID != other {
			t.Errorf("stack changed: %+v", s)
		}
	})
	t.Run("planned mount is elsewhere", func(t *testing.T) {
		k, old := node(t, mountreplace.Attrs{})
		_, err := replacer(k, true).Replace(mountreplace.Request{Target: fresh, Old: old, LivePath: fresh})
		if !errors.Is(err, mountreplace.ErrTargetChanged) {
			t.Fatalf("err = %v, want ErrTargetChanged", err)
		}
	})
	t.Run("a mount lands on top before the detach", func(t *testing.T) {
		k, old := node(t, mountreplace.Attrs{})
		var intruder int
		k.BeforeDetach = func(k *mountreplacetest.FakeKernel) {
			intruder = k.Mount(mountreplacetest.Mount{MountPoint: target, Dev: "0:78"})
		}
		res, err := replacer(k, true).Replace(mountreplace.Request{Target: target, Old: old, LivePath: fresh})
		if !errors.Is(err, mountreplace.ErrTargetChanged) {
			t.Fatalf("err = %v, want ErrTargetChanged", err)
		}
		s := k.Stack(target)
		if len(s) != 3 || s[0].ID != res.New || s[1].ID != old || s[2].ID != intruder {
			t.Errorf("stack %+v; want new %d, old %d, intruder %d, nothing detached", s, res.New, old, intruder)
		}
	})
}

func TestReplaceRejectsIncompleteRequests(t *testing.T) {
	k, old := node(t, mountreplace.Attrs{})
	for _, req := range []mountreplace.Request{
		{Old: old, LivePath: fresh},
		{Target: target, LivePath: fresh},
		{Target: target, Old: old},
	} {
		if _, err := replacer(k, true).Replace(req); !errors.Is(err, mountreplace.ErrInvalid) {
			t.Errorf("Replace(%+v) = %v, want ErrInvalid", req, err)
		}
	}
}

func TestReplaceWithGivenTreeAddsFlags(t *testing.T) {
	k, old := node(t, mountreplace.Attrs{})
	tree, err := k.Clone(fresh)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Unix(0, 0)
	r := replacer(k, true)
	r.Now = func() time.Time { clock = clock.Add(time.Millisecond); return clock }
	res, err := r.Replace(mountreplace.Request{Target: target, Old: old, Tree: tree, Add: mountreplace.Attrs{ReadOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if s := k.Stack(target); len(s) != 1 || !s[0].ReadOnly {
		t.Errorf("stack %+v; want one read-only mount", s)
	}
	if res.Took != time.Millisecond {
		t.Errorf("took %s, want 1ms from the clock", res.Took)
	}
	if k.OpenFDs() != 1 {
		t.Errorf("the caller's tree descriptor was closed (%d open)", k.OpenFDs())
	}
}

func TestAttrsOf(t *testing.T) {
	for line, want := range map[string]mountreplace.Attrs{
		"1 2 0:50 / /t rw,nosuid,nodev,relatime shared:5 - fuse.s3fs s3fs rw":           {NoSuid: true, NoDev: true},
		"1 2 0:50 /sub /t ro,nosuid,nodev,noexec,relatime master:7 - fuse.s3fs s3fs rw": {ReadOnly: true, NoSuid: true, NoDev: true, NoExec: true, Slave: true},
		"1 2 0:50 / /t rw,relatime shared:3 master:7 - fuse.s3fs s3fs rw":               {Slave: true},
		"1 2 0:50 / /t rw - fuse.s3fs s3fs rw":                                          {},
	} {
		m, err := mountinfo.ParseLine(line)
		if err != nil {
			t.Fatal(err)
		}
		if got := mountreplace.AttrsOf(m); got != want {
			t.Errorf("AttrsOf(%q) = %+v, want %+v", line, got, want)
		}
	}
	m, _ := mountinfo.ParseLine("1 2 0:50 / /t rw,relatime shared:3 master:7 - fuse.s3fs s3fs rw")
	if p := mountreplace.PropagationOf(m); p.String() != "shared+slave" {
		t.Errorf("PropagationOf = %s", p)
	}
}

// A tree whose source is in no peer group cannot become a slave: the caller says so and the
// new mount is private, instead of failing the check after the move with the dead mount on top.
func TestReplaceNoPeerGroup(t *testing.T) {
	k := mountreplacetest.NewFakeKernel()
	k.Mount(mountreplacetest.Mount{MountPoint: target, Dev: "0:60"}) // private live mount
	k.Mount(mountreplacetest.Mount{MountPoint: "/ctr", Dev: "0:30", FSType: "overlay"})
	old := k.Mount(mountreplacetest.Mount{MountPoint: "/ctr/data", Dev: "0:50", Master: 9, Attrs: mountreplace.Attrs{Slave: true}})
	k.Watch("/ctr/data")
	res, err := replacer(k, true).Replace(mountreplace.Request{Target: "/ctr/data", Old: old, LivePath: target,
		Add: mountreplace.Attrs{Slave: true}, NoPeerGroup: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := k.Stack("/ctr/data"); res.Mode != mountreplace.Beneath || len(s) != 1 || res.Propagation != (mountreplace.Propagation{}) {
		t.Errorf("result %+v, stack %+v; want beneath, one private mount", res, s)
	}
	if len(k.Breaches) != 0 {
		t.Errorf("bare directory seen: %v", k.Breaches)
	}
}

// countingKernel counts the reads of the whole mount table.
type countingKernel struct {
	mountreplace.Kernel
	reads int
}

func (k *countingKernel) MountInfo() (string, error) {
	k.reads++
	return k.Kernel.MountInfo()
}

// TestReplaceUsesTheCallersTable: with the table the caller just read, Replace reads one fewer
// (a whole table is hundreds of lines under the kernel's mount lock on a busy node), and a table
// that does not show Old at the target stops it before anything is attached.
func TestReplaceUsesTheCallersTable(t *testing.T) {
	readsFor := func(withTable bool) int {
		k, old := node(t, mountreplace.Attrs{})
		ck := &countingKernel{Kernel: k}
		req := mountreplace.Request{Target: target, Old: old, LivePath: fresh}
		if withTable {
			s, err := k.MountInfo()
			if err != nil {
				t.Fatal(err)
			}
			if req.Table, err = mountinfo.Parse(s); err != nil {
				t.Fatal(err)
			}
		}
		res, err := mountreplace.Replacer{Kernel: ck, Support: mountreplace.Support{Beneath: true}}.Replace(req)
		if err != nil || res.Mode != mountreplace.Beneath {
			t.Fatalf("replace (caller's table %v): %+v, %v", withTable, res, err)
		}
		if s := k.Stack(target); len(s) != 1 || s[0].ID != res.New {
			t.Fatalf("stack at target = %+v; want only the new mount %d", s, res.New)
		}
		return ck.reads
	}
	if own, given := readsFor(false), readsFor(true); given != own-1 {
		t.Errorf("table reads: %d reading its own, %d with the caller's; want one fewer", own, given)
	}

	k, old := node(t, mountreplace.Attrs{})
	stale := []mountinfo.Mount{{ID: old, ParentID: 1, MountPoint: "/elsewhere"}}
	res, err := mountreplace.Replacer{Kernel: k, Support: mountreplace.Support{Beneath: true}}.Replace(
		mountreplace.Request{Target: target, Old: old, LivePath: fresh, Table: stale})
	if !errors.Is(err, mountreplace.ErrTargetChanged) || res.New != 0 {
		t.Errorf("replace with a table that has old elsewhere: %+v, %v; want ErrTargetChanged, nothing attached", res, err)
	}
	if s := k.Stack(target); len(s) != 1 || s[0].ID != old {
		t.Errorf("stack at target = %+v; want the old mount %d untouched", s, old)
	}
}

// Where the kernel tells where mounts sit (statmount), the check after a beneath move reads no
// mount table: with the caller's table, a replacement reads none at all (each read is every
// line of a busy node's table under the kernel's mount lock), and checks the same things.
// Without statmount the table is read as before.
func TestReplaceChecksPlacementsWithoutTheTable(t *testing.T) {
	for _, tc := range []struct {
		name        string
		unsupported bool
		reads       int
	}{
		{"statmount", false, 0},
		{"no statmount", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, old := node(t, mountreplace.Attrs{ReadOnly: true})
			s, err := k.MountInfo()
			if err != nil {
				t.Fatal(err)
			}
			table, err := mountinfo.Parse(s)
			if err != nil {
				t.Fatal(err)
			}
			before := k.TableReads()
			res, err := mountreplace.Replacer{Kernel: mountreplacetest.Placer{FakeKernel: k, Unsupported: tc.unsupported},
				Support: mountreplace.Support{Beneath: true}}.Replace(
				mountreplace.Request{Target: target, Old: old, LivePath: fresh, Table: table})
			if err != nil || res.Mode != mountreplace.Beneath {
				t.Fatalf("replace: %+v, %v", res, err)
			}
			st := k.Stack(target)
			if len(st) != 1 || st[0].ID != res.New || st[0].Group == 0 || !st[0].ReadOnly {
				t.Errorf("stack %+v; want only the new mount %d, shared and read-only like the old one", st, res.New)
			}
			if res.Propagation != (mountreplace.Propagation{Shared: true}) {
				t.Errorf("result propagation %s, want shared", res.Propagation)
			}
			if got := k.TableReads() - before; got != tc.reads {
				t.Errorf("mount tables read: %d, want %d", got, tc.reads)
			}
			if len(k.Breaches) != 0 {
				t.Errorf("bare directory seen: %v", k.Breaches)
			}
		})
	}
}

// A mount that landed on the old top before the check (propagation from the host) is seen by
// the placements check: nothing is detached, and the caller is told.
func TestReplacePlacementsSeeAMountThatLanded(t *testing.T) {
	k, old := node(t, mountreplace.Attrs{})
	p := &landingPlacer{Placer: mountreplacetest.Placer{FakeKernel: k}}
	res, err := mountreplace.Replacer{Kernel: p, Support: mountreplace.Support{Beneath: true}}.Replace(
		mountreplace.Request{Target: target, Old: old, LivePath: fresh})
	if !errors.Is(err, mountreplace.ErrVerify) {
		t.Fatalf("replace with a mount landed on the old top: %+v, %v; want ErrVerify", res, err)
	}
	if _, ok := k.Get(old); !ok {
		t.Errorf("the old mount %d was detached although another landed on it", old)
	}
}

// landingPlacer mounts something on the target before it answers.
type landingPlacer struct {
	mountreplacetest.Placer
	landed bool
}

func (p *landingPlacer) Placements(tree int, target string) (mountreplace.Placement, mountreplace.Placement, error) {
	if !p.landed {
		p.landed = true
		p.Mount(mountreplacetest.Mount{MountPoint: target, Dev: "0:77"})
	}
	return p.Placer.Placements(tree, target)
}
