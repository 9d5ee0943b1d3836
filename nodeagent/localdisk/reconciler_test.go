package localdisk_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk/localdisktest"
)

const (
	testState = "/var/lib/pvrescue"
	testDisk  = "/dev/disk/by-id/nvme-disk1"
)

var testVol = localdisk.Volume{PV: "pv1", Path: testDisk, MayFake: true}

func newTestReconciler(t *testing.T, h *localdisktest.FakeOS) *localdisk.Reconciler {
	t.Helper()
	r, err := localdisk.NewReconciler(h, localdisk.ReconcilerOptions{
		StateDir: testState, DevDir: "/dev", FakeSize: 512, FirstLoopMinor: 101, LoopSearchLimit: 4,
	}, func() time.Time { return time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC) })
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func ctxFor(t *testing.T) context.Context {
	return logrCtx(t)
}

func logrCtx(t *testing.T) context.Context {
	return logr.NewContext(context.Background(), testr.New(t))
}

func noViolations(t *testing.T, h *localdisktest.FakeOS) {
	t.Helper()
	if len(h.Violations) > 0 {
		t.Fatalf("invariant violations: %v", h.Violations)
	}
}

func one(t *testing.T, res localdisk.Result) localdisk.VolumeStatus {
	t.Helper()
	if len(res.Volumes) != 1 {
		t.Fatalf("want 1 volume status, got %+v", res)
	}
	return res.Volumes[0]
}

// fakeActive asserts the complete set of artefacts of an active fake on loop n.
func fakeActive(t *testing.T, h *localdisktest.FakeOS, r *localdisk.Reconciler, n int) {
	t.Helper()
	img := r.ImagePath("pv1")
	if got := h.Links[testDisk]; got != fmt.Sprintf("/dev/loop%d", n) {
		t.Fatalf("link %s -> %q, want /dev/loop%d", testDisk, got, n)
	}
	if l := h.Loops[n]; l == nil || l.BackingFile != img {
		t.Fatalf("loop%d = %+v, want backed by %s", n, l, img)
	}
	if len(h.Files[img]) != 512 {
		t.Fatalf("image size %d, want 512", len(h.Files[img]))
	}
	if _, ok := h.Files[r.RecordPath("pv1")]; !ok {
		t.Fatalf("record missing")
	}
	bound := 0
	for _, l := range h.Loops {
		if localdisk.InDir(testState, l.BackingFile) {
			bound++
		}
	}
	if bound != 1 {
		t.Fatalf("%d of our loops bound, want exactly 1: %+v", bound, h.Loops)
	}
}

// nothingLeft asserts no trace of a fake: no file in the state dir, no loop of ours, no link.
func nothingLeft(t *testing.T, h *localdisktest.FakeOS) {
	t.Helper()
	for p := range h.Files {
		if localdisk.InDir(testState, p) {
			t.Errorf("leaked state file %s", p)
		}
	}
	for _, l := range h.Loops {
		if localdisk.InDir(testState, l.BackingFile) {
			t.Errorf("leaked loop%d -> %s", l.Minor, l.BackingFile)
		}
	}
	for p, target := range h.Links {
		if _, err := localdisk.ParseLoopLinkTarget("/dev", target); err == nil {
			t.Errorf("leaked link %s -> %s", p, target)
		}
	}
}

func TestCreateFakeForMissingPath(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	r := newTestReconciler(t, h)
	st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if st.State != localdisk.StateFaked || st.Loop != 101 || !st.Created || st.Err != nil {
		t.Fatalf("status %+v", st)
	}
	fakeActive(t, h, r, 101)
	noViolations(t, h)

	// A second pass changes nothing.
	calls := len(h.Calls)
	st = one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if st.State != localdisk.StateFaked || st.Created || len(h.Calls) != calls {
		t.Fatalf("second pass not idempotent: %+v, calls %v", st, h.Calls[calls:])
	}
}

func TestGateOffOnlyReports(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	r := newTestReconciler(t, h)
	st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, false))
	if st.State != localdisk.StateMissing || len(h.Calls) != 0 {
		t.Fatalf("status %+v, calls %v", st, h.Calls)
	}
}

func TestForeignLoopSkipped(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	h.Files["/srv/other.img"] = make([]byte, 4096)
	h.Loops[101] = &localdisk.Loop{Minor: 101, BackingFile: "/srv/other.img"}
	r := newTestReconciler(t, h)
	st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if st.State != localdisk.StateFaked || st.Loop != 102 {
		t.Fatalf("status %+v", st)
	}
	if h.Loops[101].BackingFile != "/srv/other.img" {
		t.Fatalf("foreign loop changed: %+v", h.Loops[101])
	}
	noViolations(t, h)
}

func TestLoopBoundMeanwhileIsSkipped(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	r := newTestReconciler(t, h)
	// Someone binds loop101 between our listing and our attach: the kernel says EBUSY.
	h.Fail = func(op, arg string) error {
		if op == "attach" && h.Loops[101] == nil {
			h.Loops[101] = &localdisk.Loop{Minor: 101, BackingFile: "/srv/raced.img"}
			return fmt.Errorf("loop101: %w", localdisk.ErrLoopBusy)
		}
		return nil
	}
	st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if st.State != localdisk.StateFaked || st.Loop != 102 || h.Loops[101].BackingFile != "/srv/raced.img" {
		t.Fatalf("status %+v loops %+v", st, h.Loops)
	}
}

func TestLoopsExhausted(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	for n := 101; n < 105; n++ {
		h.Loops[n] = &localdisk.Loop{Minor: n, BackingFile: fmt.Sprintf("/srv/%d.img", n)}
	}
	r := newTestReconciler(t, h)
	st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if st.State != localdisk.StateMissing || !errors.Is(st.Err, localdisk.ErrNoFreeLoop) {
		t.Fatalf("status %+v", st)
	}
	if _, ok := h.Links[testDisk]; ok {
		t.Fatal("link made without a loop")
	}
	noViolations(t, h)
}

func TestStateDirNotWritable(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	h.ReadOnly = true
	r := newTestReconciler(t, h)
	st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if st.State != localdisk.StateMissing || !errors.Is(st.Err, fs.ErrPermission) {
		t.Fatalf("status %+v", st)
	}
	if len(h.Calls) != 0 {
		t.Fatalf("touched: %v", h.Calls)
	}
}

// Invariant: a fake only where the path is absent — never over a link, file, device or dir.
func TestNeverOverExistingPath(t *testing.T) {
	for name, setup := range map[string]func(h *localdisktest.FakeOS){
		"real device":  func(h *localdisktest.FakeOS) { h.Devices[testDisk] = true },
		"foreign link": func(h *localdisktest.FakeOS) { h.Links[testDisk] = "../../nvme0n1" },
		"link to loop3": func(h *localdisktest.FakeOS) {
			h.Links[testDisk] = "/dev/loop3"
			h.Loops[3] = &localdisk.Loop{Minor: 3, BackingFile: "/srv/x"}
		},
		"dangling link":  func(h *localdisktest.FakeOS) { h.Links[testDisk] = "/dev/nvme9n1" },
		"regular file":   func(h *localdisktest.FakeOS) { h.Files[testDisk] = []byte("x") },
		"directory":      func(h *localdisktest.FakeOS) { h.Dirs[testDisk] = true },
		"link to a dir":  func(h *localdisktest.FakeOS) { h.Links[testDisk] = "/dev/disk"; h.Dirs["/dev/disk"] = true },
		"unbound loop N": func(h *localdisktest.FakeOS) { h.Links[testDisk] = "/dev/loop101" },
	} {
		t.Run(name, func(t *testing.T) {
			h := localdisktest.NewFakeOS(testState, "/dev")
			setup(h)
			r := newTestReconciler(t, h)
			st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
			// A dangling chain is Missing now, but its missing end (/dev/nvme9n1, /dev/loop101)
			// is a kernel name: reported, never faked.
			if st.State == localdisk.StateFaked {
				t.Fatalf("status %+v", st)
			}
			if len(h.Calls) != 0 {
				t.Fatalf("touched: %v", h.Calls)
			}
			noViolations(t, h)
		})
	}
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		path string
		want error
	}{
		{"disk/by-id/x", localdisk.ErrRelativePath},
		{"/srv/disks/x", localdisk.ErrNotUnderDev},
		{"/dev/disk/../../etc/x", localdisk.ErrRelativePath},
	} {
		h := localdisktest.NewFakeOS(testState, "/dev")
		r := newTestReconciler(t, h)
		st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{{PV: "pv1", Path: tc.path}}, true))
		if st.State != localdisk.StateInvalid || !errors.Is(st.Err, tc.want) || len(h.Calls) != 0 {
			t.Errorf("%s: status %+v calls %v", tc.path, st, h.Calls)
		}
	}
	h := localdisktest.NewFakeOS(testState, "/dev")
	h.Dirs[testDisk] = true
	st := one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if !errors.Is(st.Err, localdisk.ErrPathIsDir) {
		t.Errorf("directory: %+v", st)
	}
}

func TestPathAppearsWhileLinking(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	h.Fail = func(op, arg string) error {
		if op == "symlink" {
			h.Devices[testDisk] = true // udev wins the race
		}
		return nil
	}
	r := newTestReconciler(t, h)
	st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if !errors.Is(st.Err, localdisk.ErrPathAppeared) || !h.Devices[testDisk] {
		t.Fatalf("status %+v", st)
	}
	// Next pass: the disk is present, the half-made fake is retired.
	h.Fail = nil
	res := r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true)
	if one(t, res).State != localdisk.StatePresent || len(res.Retired) != 1 || !res.Retired[0].Done {
		t.Fatalf("result %+v", res)
	}
	nothingLeft(t, h)
	noViolations(t, h)
}

func TestDiskReturnsRetiredOnceUnheld(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	r := newTestReconciler(t, h)
	one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	// The real disk returns: udev replaces the link.
	h.Links[testDisk] = "../../nvme0n1"
	h.Devices["/dev/nvme0n1"] = true
	kubeletLock := &localdisk.Loop{Minor: 0, BackingFile: "/var/lib/kubelet/plugins/kubernetes.io~local-volume/volumeDevices/pv1/uid",
		BackingIsDev: true, BackingMajor: localdisk.LoopMajor, BackingMinor: 101}
	byPath := &localdisk.Loop{Minor: 1, BackingFile: "/dev/loop101"}
	for i, hold := range []func(){
		func() { h.Loops[101].Holders = []string{"dm-0"} },
		func() { h.Loops[101].Holders = nil; h.Loops[0] = kubeletLock },
		func() { delete(h.Loops, 0); h.Loops[1] = byPath },
	} {
		hold()
		res := r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true)
		if one(t, res).State != localdisk.StatePresent || len(res.Retired) != 1 {
			t.Fatalf("holder %d: result %+v", i, res)
		}
		if rt := res.Retired[0]; !rt.DiskReturned || !rt.Held || rt.Done || rt.Loop != 101 {
			t.Fatalf("holder %d: retire %+v", i, rt)
		}
		if h.Loops[101].BackingFile == "" {
			t.Fatalf("holder %d: held loop detached", i)
		}
	}
	delete(h.Loops, 1)
	res := r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true)
	if rt := res.Retired[0]; !rt.Done || rt.Held {
		t.Fatalf("retire %+v", rt)
	}
	if h.Links[testDisk] != "../../nvme0n1" {
		t.Fatal("real disk link touched")
	}
	nothingLeft(t, h)
	noViolations(t, h)
	// And nothing more to do.
	if res := r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true); len(res.Retired) != 0 {
		t.Fatalf("retired again: %+v", res.Retired)
	}
}

func TestPVGoneRemovesOurLinkOnly(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	r := newTestReconciler(t, h)
	one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	res := r.Sync(ctxFor(t), nil, true)
	if len(res.Retired) != 1 || !res.Retired[0].Done || res.Retired[0].DiskReturned {
		t.Fatalf("result %+v", res)
	}
	nothingLeft(t, h)
	if _, ok := h.Links[testDisk]; ok {
		t.Fatal("our link not removed")
	}
	noViolations(t, h)

	// Same, but the path was replaced by a foreign link meanwhile: it stays.
	h = localdisktest.NewFakeOS(testState, "/dev")
	r = newTestReconciler(t, h)
	one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	h.Links[testDisk] = "/dev/loop3"
	h.Loops[3] = &localdisk.Loop{Minor: 3, BackingFile: "/srv/foreign.img"}
	res = r.Sync(ctxFor(t), nil, true)
	if !res.Retired[0].Done || h.Links[testDisk] != "/dev/loop3" || h.Loops[3].BackingFile != "/srv/foreign.img" {
		t.Fatalf("result %+v links %v", res, h.Links)
	}
	noViolations(t, h)
}

func TestRestartReadopts(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	calls := len(h.Calls)
	st := one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
	if st.State != localdisk.StateFaked || st.Created || st.Loop != 101 || len(h.Calls) != calls {
		t.Fatalf("status %+v, new calls %v", st, h.Calls[calls:])
	}
	// Re-adopted even with creation gated off.
	st = one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{testVol}, false))
	if st.State != localdisk.StateFaked {
		t.Fatalf("status %+v", st)
	}
}

func TestOrphans(t *testing.T) {
	h := localdisktest.NewFakeOS(testState, "/dev")
	r := newTestReconciler(t, h)
	// An image without record, attached; an image without record or loop; a loop of ours whose
	// image was deleted.
	h.Files[r.ImagePath("a")] = make([]byte, 512)
	h.Loops[101] = &localdisk.Loop{Minor: 101, BackingFile: r.ImagePath("a")}
	h.Files[r.ImagePath("b")] = make([]byte, 512)
	h.Loops[102] = &localdisk.Loop{Minor: 102, BackingFile: r.ImagePath("c"), Deleted: true}
	// Torn writes from a crash.
	h.Files[testState+"/localdisk/.d.img.tmp"] = make([]byte, 100)
	h.Files[testState+"/localdisk/.d.json.tmp"] = []byte("{")
	res := r.Sync(ctxFor(t), nil, true)
	if len(res.Errors) != 0 {
		t.Fatalf("errors %v", res.Errors)
	}
	nothingLeft(t, h)
	noViolations(t, h)
}

// Crash injection: a failure at each step of creating, then a fresh reconciler converges with
// exactly one fake and nothing leaked; likewise for retiring.
func TestCrashInjectionCreate(t *testing.T) {
	for _, op := range []string{"mkdir", "writefile", "image", "attach", "symlink", "listloops", "readdir", "lstat"} {
		t.Run(op, func(t *testing.T) {
			h := localdisktest.NewFakeOS(testState, "/dev")
			h.Fail = func(o, _ string) error {
				if o == op {
					return errors.New("injected crash at " + op)
				}
				return nil
			}
			res := newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{testVol}, true)
			if len(res.Errors) == 0 && (len(res.Volumes) != 1 || res.Volumes[0].Err == nil) {
				t.Fatalf("injected failure not reported: %+v", res)
			}
			h.Fail = nil
			r := newTestReconciler(t, h)
			st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
			if st.State != localdisk.StateFaked {
				t.Fatalf("did not converge: %+v", st)
			}
			fakeActive(t, h, r, 101)
			noViolations(t, h)
		})
	}
}

func TestCrashInjectionRetire(t *testing.T) {
	for _, op := range []string{"lstat", "unlink", "detach", "rm"} {
		for _, returned := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/returned=%v", op, returned), func(t *testing.T) {
				h := localdisktest.NewFakeOS(testState, "/dev")
				one(t, newTestReconciler(t, h).Sync(ctxFor(t), []localdisk.Volume{testVol}, true))
				vols := []localdisk.Volume(nil)
				if returned {
					h.Links[testDisk] = "../../nvme0n1"
					h.Devices["/dev/nvme0n1"] = true
					vols = []localdisk.Volume{testVol}
				}
				n := 0
				h.Fail = func(o, _ string) error {
					if o == op {
						n++
						return errors.New("injected crash at " + op)
					}
					return nil
				}
				newTestReconciler(t, h).Sync(ctxFor(t), vols, true)
				h.Fail = nil
				res := newTestReconciler(t, h).Sync(ctxFor(t), vols, true)
				if len(res.Retired) > 0 && !res.Retired[0].Done {
					t.Fatalf("did not converge: %+v", res.Retired)
				}
				nothingLeft(t, h)
				noViolations(t, h)
			})
		}
	}
}
