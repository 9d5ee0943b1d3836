//go:build node

package localdisk_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/testenv"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
)

// The node tests use loops 150..169 (the sidecar tests use 200+), check they are free first and
// detach in Cleanup only the loops they attached themselves.
const nodeFirstLoop = 150

type nodeEnv struct {
	state, byID, devPath string
	host                 *localdisk.RealOS
	r                    *localdisk.Reconciler
}

func setupNode(t *testing.T) *nodeEnv {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "losetup", "apt-get install util-linux")
	for n := nodeFirstLoop; n < nodeFirstLoop+20; n++ {
		if b, _ := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/loop/backing_file", n)); len(b) > 0 {
			t.Fatalf("loop%d is in use on this host (%s): the node tests need loops %d..%d free",
				n, strings.TrimSpace(string(b)), nodeFirstLoop, nodeFirstLoop+19)
		}
	}
	e := &nodeEnv{state: t.TempDir(), byID: t.TempDir()}
	e.devPath = filepath.Join(e.byID, "nvme-disk1")
	// The "real disk" that udev-style links point at (a chain must end in a device to be present).
	if err := unix.Mknod(filepath.Join(e.byID, "real-nvme0n1"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
		t.Fatal(err)
	}
	e.host = localdisk.NewRealOS(e.state)
	e.r = e.reconciler(t)
	// Runs after detachUnder: removes the loop nodes the reconciler made for its fakes.
	testenv.LoopNodesT(t, testenv.LoopRange{First: nodeFirstLoop, Last: nodeFirstLoop + 19})
	t.Cleanup(func() { detachUnder(t, e.state) })
	return e
}

func (e *nodeEnv) reconciler(t *testing.T) *localdisk.Reconciler {
	t.Helper()
	r, err := localdisk.NewReconciler(e.host, localdisk.ReconcilerOptions{
		StateDir: e.state, DevDir: "/dev", PathRoots: []string{e.byID}, LinkRoots: []string{e.byID}, FakeSize: 512,
		FirstLoopMinor: nodeFirstLoop, LoopSearchLimit: 20,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// detachUnder detaches every loop in the test range whose backing file lies under dir (test
// files only: dir is a t.TempDir).
func detachUnder(t *testing.T, dir string) {
	for n := nodeFirstLoop; n < nodeFirstLoop+20; n++ {
		b, _ := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/loop/backing_file", n))
		p, _ := localdisk.ParseBackingFile(string(b))
		if p != "" && localdisk.InDir(dir, p) {
			if out, err := exec.Command("losetup", "-d", fmt.Sprintf("/dev/loop%d", n)).CombinedOutput(); err != nil {
				t.Errorf("cleanup: losetup -d loop%d: %v %s", n, err, out)
			}
		}
	}
}

// foreignLoop attaches a test file (not in the state dir) to loop n with losetup.
func foreignLoop(t *testing.T, n int, backing string) {
	t.Helper()
	dir := filepath.Dir(backing)
	if _, err := os.Stat(backing); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(backing, make([]byte, 1<<20), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	node := fmt.Sprintf("/dev/loop%d", n)
	if _, err := os.Stat(node); err != nil {
		if err := unix.Mknod(node, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.Command("losetup", node, backing).CombinedOutput(); err != nil {
		t.Fatalf("losetup %s %s: %v %s", node, backing, err, out)
	}
	t.Cleanup(func() { detachUnder(t, dir) })
}

func deviceSize(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path) // read-only: the tests never write to a device either
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }() // opened to read its size only
	var size uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptrOf(&size)); e != 0 {
		t.Fatalf("BLKGETSIZE64 %s: %v", path, e)
	}
	return int64(size)
}

// loopStates describes the test's loop numbers for a failure message.
func loopStates() string {
	var out []string
	for n := nodeFirstLoop; n < nodeFirstLoop+5; n++ {
		out = append(out, fmt.Sprintf("loop%d=%q", n, sysBacking(n)))
	}
	return strings.Join(out, " ")
}

func sysBacking(n int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/sys/block/loop%d/loop/backing_file", n))
	p, _ := localdisk.ParseBackingFile(string(b))
	return p
}

func (e *nodeEnv) sync(t *testing.T, present bool) localdisk.VolumeStatus {
	t.Helper()
	vols := []localdisk.Volume{{PV: "pv1", Path: e.devPath, MayFake: true}}
	if !present {
		vols = nil
	}
	res := e.r.Sync(logrCtx(t), vols, true)
	for _, err := range res.Errors {
		t.Errorf("sync error: %v", err)
	}
	if len(res.Volumes) == 0 {
		return localdisk.VolumeStatus{}
	}
	return res.Volumes[0]
}

func TestNodeMissingPathGetsFake(t *testing.T) {
	e := setupNode(t)
	st := e.sync(t, true)
	if st.State != localdisk.StateFaked || st.Loop != nodeFirstLoop || st.Err != nil {
		t.Fatalf("status %+v", st)
	}
	target, err := os.Readlink(e.devPath)
	if err != nil || target != fmt.Sprintf("/dev/loop%d", nodeFirstLoop) {
		t.Fatalf("link %q, %v", target, err)
	}
	if got := deviceSize(t, e.devPath); got != 512 {
		t.Fatalf("fake device size %d, want 512", got)
	}
	if got := sysBacking(nodeFirstLoop); got != e.r.ImagePath("pv1") {
		t.Fatalf("backing file %q", got)
	}
	// Restart: a new host and reconciler re-adopt the fake without changing anything.
	e.host = localdisk.NewRealOS(e.state)
	e.r = e.reconciler(t)
	if st := e.sync(t, true); st.State != localdisk.StateFaked || st.Created || st.Loop != nodeFirstLoop {
		t.Fatalf("after restart: %+v", st)
	}
	// The PV goes away: link, loop and files are removed.
	e.sync(t, false)
	if _, err := os.Lstat(e.devPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("link left: %v", err)
	}
	if got := sysBacking(nodeFirstLoop); got != "" {
		t.Fatalf("loop still bound to %q", got)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.state, localdisk.SubDir)); len(ents) != 0 {
		t.Fatalf("state files left: %v", ents)
	}
}

func TestNodeForeignLoopSkipped(t *testing.T) {
	e := setupNode(t)
	foreign := filepath.Join(t.TempDir(), "foreign.img")
	foreignLoop(t, nodeFirstLoop, foreign)
	st := e.sync(t, true)
	if st.State != localdisk.StateFaked || st.Loop != nodeFirstLoop+1 {
		t.Fatalf("status %+v", st)
	}
	e.sync(t, false)
	if got := sysBacking(nodeFirstLoop); got != foreign {
		t.Fatalf("foreign loop changed: backing %q", got)
	}
	if got := sysBacking(nodeFirstLoop + 1); got != "" {
		t.Fatalf("our loop not detached: %q", got)
	}
}

func TestNodeExistingPathNeverTouched(t *testing.T) {
	for name, make := range map[string]func(t *testing.T, p string){
		"foreign link": func(t *testing.T, p string) {
			if err := os.Symlink("real-nvme0n1", p); err != nil {
				t.Fatal(err)
			}
		},
		"link to a foreign loop": func(t *testing.T, p string) {
			foreignLoop(t, nodeFirstLoop, filepath.Join(t.TempDir(), "f.img"))
			if err := os.Symlink(fmt.Sprintf("/dev/loop%d", nodeFirstLoop), p); err != nil {
				t.Fatal(err)
			}
		},
		"block device": func(t *testing.T, p string) {
			if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 0))); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			e := setupNode(t)
			make(t, e.devPath)
			before, _ := os.Lstat(e.devPath)
			beforeLink, _ := os.Readlink(e.devPath)
			st := e.sync(t, true)
			if st.State != localdisk.StatePresent {
				t.Fatalf("status %+v", st)
			}
			after, err := os.Lstat(e.devPath)
			afterLink, _ := os.Readlink(e.devPath)
			if err != nil || after.Mode() != before.Mode() || afterLink != beforeLink ||
				after.Sys().(*syscall.Stat_t).Ino != before.Sys().(*syscall.Stat_t).Ino {
				t.Fatalf("path changed: %v %v -> %v %v (%v)", before.Mode(), beforeLink, after.Mode(), afterLink, err)
			}
			if ents, _ := os.ReadDir(filepath.Join(e.state, localdisk.SubDir)); len(ents) != 0 {
				t.Fatalf("state files made: %v", ents)
			}
		})
	}
}

// kubelet wraps the mapped device in a loop of its own, backed by a device node of our loop:
// the fake stays attached until that lock is gone.
func TestNodeDiskReturnsRetiredOnceUnheld(t *testing.T) {
	e := setupNode(t)
	if st := e.sync(t, true); st.State != localdisk.StateFaked {
		t.Fatalf("status %+v", st)
	}
	lockDir := t.TempDir()
	lockNode := filepath.Join(lockDir, "pod-uid")
	if err := unix.Mknod(lockNode, unix.S_IFBLK|0o600, int(unix.Mkdev(7, nodeFirstLoop))); err != nil {
		t.Fatal(err)
	}
	foreignLoop(t, nodeFirstLoop+1, lockNode) // kubelet's device lock
	// The real disk returns: the link is replaced (as udev does) by a link to something else.
	if err := os.Remove(e.devPath); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real-nvme0n1", e.devPath); err != nil {
		t.Fatal(err)
	}
	res := e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: "pv1", Path: e.devPath, MayFake: true}}, true)
	if len(res.Retired) != 1 || !res.Retired[0].Held || res.Retired[0].Done || !res.Retired[0].DiskReturned {
		t.Fatalf("retired %+v", res.Retired)
	}
	if sysBacking(nodeFirstLoop) != e.r.ImagePath("pv1") {
		t.Fatal("held fake detached")
	}
	detachUnder(t, lockDir) // the pod is gone, kubelet releases its lock
	res = e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: "pv1", Path: e.devPath, MayFake: true}}, true)
	if len(res.Retired) != 1 || !res.Retired[0].Done {
		t.Fatalf("retired %+v", res.Retired)
	}
	if sysBacking(nodeFirstLoop) != "" {
		t.Fatal("fake not detached")
	}
	if l, _ := os.Readlink(e.devPath); l != "real-nvme0n1" {
		t.Fatalf("real disk link touched: %q", l)
	}
}

// crashHost fails one operation once, like a crash between two steps.
type crashHost struct {
	localdisk.OS
	op    string
	fired bool
}

func (c *crashHost) hit(op string) error {
	if op == c.op && !c.fired {
		c.fired = true
		return errors.New("injected crash at " + op)
	}
	return nil
}

func (c *crashHost) WriteFileAtomic(p string, b []byte) error {
	if err := c.hit("writefile"); err != nil {
		return err
	}
	return c.OS.WriteFileAtomic(p, b)
}

func (c *crashHost) CreateImage(p string, n int64) error {
	if err := c.hit("image"); err != nil {
		return err
	}
	return c.OS.CreateImage(p, n)
}

func (c *crashHost) Attach(p string, n int) error {
	if err := c.hit("attach"); err != nil {
		return err
	}
	return c.OS.Attach(p, n)
}

func (c *crashHost) Symlink(tg, p string) error {
	if err := c.hit("symlink"); err != nil {
		return err
	}
	return c.OS.Symlink(tg, p)
}

func (c *crashHost) Detach(n int) error {
	if err := c.hit("detach"); err != nil {
		return err
	}
	return c.OS.Detach(n)
}

func (c *crashHost) RemoveFile(p string) error {
	if err := c.hit("rm"); err != nil {
		return err
	}
	return c.OS.RemoveFile(p)
}

func (c *crashHost) RemoveSymlink(p, tg string) error {
	if err := c.hit("unlink"); err != nil {
		return err
	}
	return c.OS.RemoveSymlink(p, tg)
}

func TestNodeCrashInjection(t *testing.T) {
	for _, op := range []string{"writefile", "image", "attach", "symlink", "unlink", "detach", "rm"} {
		t.Run(op, func(t *testing.T) {
			e := setupNode(t)
			vols := []localdisk.Volume{{PV: "pv1", Path: e.devPath, MayFake: true}}
			crash := &crashHost{OS: e.host, op: op}
			r, _ := localdisk.NewReconciler(crash, e.r.Options(), nil)
			r.Sync(logrCtx(t), vols, true)
			r.Sync(logrCtx(t), nil, true) // and retire, crashing there when op is a retire step
			if !crash.fired {
				t.Fatalf("crash at %s never injected", op)
			}
			// A fresh reconciler (restart) converges: fake made, then fully retired.
			e.r = e.reconciler(t)
			if st := e.sync(t, true); st.State != localdisk.StateFaked || st.Loop != nodeFirstLoop {
				t.Fatalf("did not converge to a fake: %+v", st)
			}
			e.sync(t, false)
			for n := nodeFirstLoop; n < nodeFirstLoop+20; n++ {
				if p := sysBacking(n); p != "" && localdisk.InDir(e.state, p) {
					t.Errorf("leaked loop%d -> %s", n, p)
				}
			}
			if _, err := os.Lstat(e.devPath); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("leaked link: %v", err)
			}
			ents, _ := os.ReadDir(filepath.Join(e.state, localdisk.SubDir))
			if len(ents) != 0 {
				t.Errorf("leaked state files: %v", ents)
			}
			ents, _ = os.ReadDir(e.byID)
			for _, ent := range ents {
				if ent.Name() != "real-nvme0n1" { // setupNode's "real disk"
					t.Errorf("leaked entry in the by-id dir: %s", ent.Name())
				}
			}
		})
	}
}
