//go:build node

package localdisk_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
)

// layoutEnv: a discovery directory (as local-static-provisioner's) and a by-id directory, the
// only link root; real loops in the test range.
type layoutEnv struct {
	*nodeEnv
	disc string
}

func setupLayout(t *testing.T) *layoutEnv {
	t.Helper()
	e := &layoutEnv{nodeEnv: setupNode(t), disc: t.TempDir()}
	r, err := localdisk.NewReconciler(e.host, localdisk.ReconcilerOptions{
		StateDir: e.state, DevDir: "/dev", PathRoots: []string{e.disc, e.byID}, LinkRoots: []string{e.byID},
		FakeSize: 512, FirstLoopMinor: nodeFirstLoop, LoopSearchLimit: 20,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.r = r
	return e
}

// The provisioner layout: /disc/ssd0 -> /byid/nvme-x, the by-id link gone with the disk. The fake
// goes at the by-id component; the admin's link is untouched.
func TestNodeProvisionerChainFakedAtByID(t *testing.T) {
	e := setupLayout(t)
	admin := filepath.Join(e.disc, "ssd0")
	byid := filepath.Join(e.byID, "nvme-x")
	if err := os.Symlink(byid, admin); err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	if err := unix.Lstat(admin, &before); err != nil {
		t.Fatal(err)
	}
	st := one(t, e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: "pv1", Path: admin, MayFake: true}}, true))
	if st.State != localdisk.StateFaked || st.Link != byid {
		t.Fatalf("status %+v", st)
	}
	if got := ourLinkTarget(byid); got != fmt.Sprintf("/dev/loop%d", st.Loop) {
		t.Fatalf("by-id link -> %q", got)
	}
	var after unix.Stat_t
	if err := unix.Lstat(admin, &after); err != nil || after.Ino != before.Ino {
		t.Fatalf("admin link changed (%v)", err)
	}
	if l, _ := os.Readlink(admin); l != byid {
		t.Fatalf("admin link content %q", l)
	}
	if got := deviceSize(t, admin); got != 512 {
		t.Fatalf("fake size through the chain %d", got)
	}
}

// The fake is attached read-only: a write fails loudly.
func TestNodeFakeIsReadOnly(t *testing.T) {
	e := setupLayout(t)
	p := filepath.Join(e.byID, "nvme-ro")
	st := one(t, e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: "pv1", Path: p, MayFake: true}}, true))
	if st.State != localdisk.StateFaked {
		t.Fatalf("status %+v", st)
	}
	if ro, _ := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/ro", st.Loop)); string(ro) != "1\n" {
		t.Fatalf("/sys/block/loop%d/ro = %q", st.Loop, ro)
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.Write(make([]byte, 512))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		t.Fatal("a write to the fake succeeded")
	}
	t.Logf("write to the fake: %v", err)
}

// Someone detaches the fake's loop: the link is ours by record, removed, never a DiskReturned,
// and the minor it pointed at is not handed to another PV's fake.
func TestNodeStaleLinkAfterDetach(t *testing.T) {
	e := setupLayout(t)
	p1, p2 := filepath.Join(e.byID, "nvme-1"), filepath.Join(e.byID, "nvme-2")
	st := one(t, e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: "pv1", Path: p1, MayFake: true}}, true))
	if st.State != localdisk.StateFaked {
		t.Fatalf("status %+v", st)
	}
	minor := st.Loop
	if out, err := exec.Command("losetup", "-d", fmt.Sprintf("/dev/loop%d", minor)).CombinedOutput(); err != nil {
		t.Fatalf("losetup -d: %v %s", err, out)
	}
	// pv2 goes first in the pass (sorted), while pv1's stale link still points at the minor.
	res := e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: "pv1", Path: p1}, {PV: "pv0", Path: p2, MayFake: true}}, true)
	for _, rt := range res.Retired {
		if rt.DiskReturned {
			t.Fatalf("stale link counted as a returned disk: %+v", rt)
		}
	}
	var s0, s1 localdisk.VolumeStatus
	for _, v := range res.Volumes {
		if v.PV == "pv0" {
			s0 = v
		} else {
			s1 = v
		}
	}
	if s0.State != localdisk.StateFaked || s0.Loop == minor {
		t.Fatalf("pv0 %+v reused minor %d", s0, minor)
	}
	if s1.State != localdisk.StateMissing {
		t.Fatalf("pv1 %+v, want Missing (link removed, no new fake: MayFake off)", s1)
	}
	if _, err := os.Lstat(p1); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale link kept: %v", err)
	}
}

// A kernel device name is never faked, only reported.
func TestNodeKernelNameReportedOnly(t *testing.T) {
	e := setupLayout(t)
	p := "/dev/sdpvrescuetest"
	st := one(t, e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: "pv1", Path: p, MayFake: true}}, true))
	if st.State != localdisk.StateMissing || !errors.Is(st.Err, localdisk.ErrKernelName) {
		t.Fatalf("status %+v", st)
	}
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%s made: %v", p, err)
	}
}

// The PV is recreated with the same name and a new path: the old link goes.
func TestNodePathChangeRemovesOldLink(t *testing.T) {
	e := setupLayout(t)
	oldP, newP := filepath.Join(e.byID, "nvme-old"), filepath.Join(e.byID, "nvme-new")
	if st := one(t, e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: "pv1", Path: oldP, MayFake: true}}, true)); st.State != localdisk.StateFaked {
		t.Fatalf("status %+v", st)
	}
	st := one(t, e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: "pv1", Path: newP, MayFake: true}}, true))
	if st.State != localdisk.StateFaked || ourLinkTarget(newP) == "" {
		t.Fatalf("status %+v", st)
	}
	if _, err := os.Lstat(oldP); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("old link leaked: %v", err)
	}
}
