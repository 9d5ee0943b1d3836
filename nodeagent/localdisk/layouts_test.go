package localdisk_test

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk/localdisktest"
)

const (
	discLink = "/mnt/fast-disks/ssd0"
	byIDLink = "/dev/disk/by-id/nvme-x"
)

func TestProvisionerChainFakedAtByID(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	h.Links[discLink] = byIDLink // the admin's link; udev removed the by-id one with the disk
	r := newTestReconciler(t, h)
	st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: discLink, MayFake: true}}, true))
	if st.State != localdisk.StateFaked || st.Link != byIDLink || h.Links[byIDLink] != "/dev/loop101" {
		t.Fatalf("status %+v links %v", st, h.Links)
	}
	if h.Links[discLink] != byIDLink {
		t.Fatalf("admin link changed: %q", h.Links[discLink])
	}
	// Next pass: recognised through the chain, nothing done.
	calls := len(h.Calls)
	st = one(t, r.Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: discLink, MayFake: true}}, true))
	if st.State != localdisk.StateFaked || st.Created || len(h.Calls) != calls {
		t.Fatalf("second pass %+v calls %v", st, h.Calls[calls:])
	}
	// The disk returns: udev's by-id link replaces ours; DiskReturned, retired, admin link kept.
	h.Locked(func() { h.Links[byIDLink] = "../../nvme0n1"; h.Devices["/dev/nvme0n1"] = true })
	res := r.Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: discLink, MayFake: true}}, true)
	if len(res.Retired) != 1 || !res.Retired[0].DiskReturned || !res.Retired[0].Done {
		t.Fatalf("retired %+v", res.Retired)
	}
	if h.Links[discLink] != byIDLink || h.Links[byIDLink] != "../../nvme0n1" {
		t.Fatalf("links %v", h.Links)
	}
	noViolations(t, h)
}

func TestDanglingChainOutsideLinkRootsReportedOnly(t *testing.T) {
	for name, tc := range map[string]struct {
		target string
		want   error
	}{
		"kernel name":           {"/dev/sdz", localdisk.ErrKernelName},
		"outside link roots":    {"/srv/disks/x", localdisk.ErrNotUnderLinkRoot},
		"another discovery dir": {"/mnt/disks/gone", localdisk.ErrNotUnderLinkRoot},
	} {
		t.Run(name, func(t *testing.T) {
			h := localdisktest.NewFakeOS(testState, "/dev")
			h.Links[discLink] = tc.target
			st := one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: discLink, MayFake: true}}, true))
			if st.State != localdisk.StateMissing || !errors.Is(st.Err, tc.want) || len(h.Calls) != 0 {
				t.Fatalf("status %+v calls %v", st, h.Calls)
			}
		})
	}
	h := localdisktest.NewFakeOS(testState, "/dev")
	st := one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: "/dev/sdb", MayFake: true}}, true))
	if st.State != localdisk.StateMissing || !errors.Is(st.Err, localdisk.ErrKernelName) || len(h.Calls) != 0 {
		t.Fatalf("/dev/sdb: status %+v calls %v", st, h.Calls)
	}
}

// A discovery directory the agent cannot see (not mounted into its container) makes the admin's
// link itself the first missing component: reported with the reason, nothing made.
func TestDiscoveryDirNotVisibleSaysSo(t *testing.T) {
	for name, tc := range map[string]struct {
		dirVisible bool
		want       bool
	}{"directory missing in the agent's view": {false, true}, "directory there, entry gone": {true, false}} {
		t.Run(name, func(t *testing.T) {
			h := localdisktest.NewFakeOS(testState, "/dev")
			h.Dirs[filepath.Dir(discLink)] = tc.dirVisible
			st := one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: discLink, MayFake: true}}, true))
			if st.State != localdisk.StateMissing || !errors.Is(st.Err, localdisk.ErrNotUnderLinkRoot) || errors.Is(st.Err, localdisk.ErrDirNotVisible) != tc.want || len(h.Calls) != 0 {
				t.Fatalf("status %+v (not visible: %v, want %v) calls %v", st, errors.Is(st.Err, localdisk.ErrDirNotVisible), tc.want, h.Calls)
			}
		})
	}
}

func TestLinkLoopIsInvalid(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	h.Links[byIDLink] = "/dev/disk/by-id/b"
	h.Links["/dev/disk/by-id/b"] = byIDLink
	st := one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: byIDLink, MayFake: true}}, true))
	if st.State != localdisk.StateInvalid || !errors.Is(st.Err, localdisk.ErrLinkLoop) || len(h.Calls) != 0 {
		t.Fatalf("status %+v", st)
	}
}

// Someone detaches (or rebinds) the fake's loop: the link is ours by record; it is removed, never
// a returned disk, and its minor is not given to another PV's fake.
func TestStaleLinkRemovedNotReturnedMinorNotReused(t *testing.T) {
	for _, rebound := range []bool{false, true} {
		h := localdisktest.NewFakeOS(testState, "/dev")
		r := newTestReconciler(t, h)
		p1, p0 := "/dev/disk/by-id/one", "/dev/disk/by-id/zero"
		if st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: p1, MayFake: true}}, true)); st.Loop != 101 {
			t.Fatalf("status %+v", st)
		}
		h.Locked(func() {
			if rebound {
				h.Loops[101] = &localdisk.Loop{Minor: 101, BackingFile: "/srv/foreign.img"}
			} else {
				h.Loops[101] = &localdisk.Loop{Minor: 101}
			}
		})
		res := r.Sync(ctxFor(t), []localdisk.Volume{{PV: "pv0", Path: p0, MayFake: true}, {PV: "pv1", Path: p1}}, true)
		for _, rt := range res.Retired {
			if rt.DiskReturned {
				t.Fatalf("rebound=%v: stale link counted as returned: %+v", rebound, rt)
			}
		}
		if res.Volumes[0].PV != "pv0" || res.Volumes[0].State != localdisk.StateFaked || res.Volumes[0].Loop == 101 {
			t.Fatalf("rebound=%v: pv0 %+v (minor 101 still linked by pv1's record)", rebound, res.Volumes[0])
		}
		if res.Volumes[1].State != localdisk.StateMissing {
			t.Fatalf("rebound=%v: pv1 %+v", rebound, res.Volumes[1])
		}
		if _, ok := h.Links[p1]; ok {
			t.Fatalf("rebound=%v: stale link kept", rebound)
		}
		if rebound && h.Loops[101].BackingFile != "/srv/foreign.img" {
			t.Fatalf("foreign loop touched")
		}
		noViolations(t, h)
	}
}

// A link of the agent's loop range that no record names is not provably ours: left alone.
func TestUnrecordedLinkToOurRangeLeftAlone(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	h.Links[byIDLink] = "/dev/loop102"
	h.Loops[102] = &localdisk.Loop{Minor: 102, BackingFile: "/srv/other.img"}
	st := one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: byIDLink, MayFake: true}}, true))
	if st.State != localdisk.StatePresent || h.Links[byIDLink] != "/dev/loop102" || len(h.Calls) != 0 {
		t.Fatalf("status %+v calls %v", st, h.Calls)
	}
}

func TestPathChangeRemovesOldLink(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	r := newTestReconciler(t, h)
	oldP, newP := "/dev/disk/by-id/old", "/dev/disk/by-id/new"
	one(t, r.Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: oldP, MayFake: true}}, true))
	st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: newP, MayFake: true}}, true))
	if st.State != localdisk.StateFaked || h.Links[newP] == "" {
		t.Fatalf("status %+v", st)
	}
	if _, ok := h.Links[oldP]; ok {
		t.Fatalf("old link leaked: %v", h.Links)
	}
	// And when the PV goes entirely, its current link goes with the fake.
	res := r.Sync(ctxFor(t), nil, true)
	if len(res.Retired) != 1 || !res.Retired[0].Done || len(h.Links) != 0 {
		t.Fatalf("retired %+v links %v", res.Retired, h.Links)
	}
	noViolations(t, h)
}

func TestFakeAttachedReadOnly(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	st := one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if !h.Loops[st.Loop].ReadOnly {
		t.Fatalf("fake loop%d not read-only", st.Loop)
	}
}

// MayFake off (an unguarded pod uses the PV): reported Missing, nothing made.
func TestNoFakeWithoutGuard(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	st := one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: testDisk}}, true))
	if st.State != localdisk.StateMissing || st.Err != nil || len(h.Calls) != 0 {
		t.Fatalf("status %+v calls %v", st, h.Calls)
	}
}
