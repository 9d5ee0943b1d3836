//go:build e2e

package scenarios

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDeathEvidence: the evidence that a kill killed a volume (deathWitness.deathProblems) is
// complete only with every part of it; each missing part is named.
func TestDeathEvidence(t *testing.T) {
	before := mountIdentity{ID: 1 << 40, Unique: true, PlainID: 812, Dev: "0:91", FSType: "fuse.s3fs"}
	other := mountIdentity{ID: 1<<40 + 7, Unique: true, PlainID: 812, Dev: "0:95", FSType: "fuse.s3fs"} // plain ID reused
	w := &deathWitness{targets: []*targetWitness{{ns: "ns", pod: "app", path: "/t", before: before, events: 0}}, deadFound: 3}
	good := deathSeen{after: []mountIdentity{other}, afterErr: []error{nil}, events: []int{1}, sameAgent: true, deadFound: 4}
	for _, c := range []struct {
		name string
		edit func(*deathSeen)
		want string // a word of the one problem; "" for none
	}{
		{name: "complete", edit: func(*deathSeen) {}},
		{name: "same mount serves the target", edit: func(s *deathSeen) { s.after = []mountIdentity{before} }, want: "same mount"},
		{name: "killed daemon still runs", edit: func(s *deathSeen) { s.running = []int{4242} }, want: "still run"},
		{name: "no restore Event", edit: func(s *deathSeen) { s.events = []int{0} }, want: "Event"},
		{name: "no mount after", edit: func(s *deathSeen) { s.afterErr = []error{errors.New("statx: ENOENT")} }, want: "no mount to compare"},
		{name: "counter did not move", edit: func(s *deathSeen) { s.deadFound = 3 }, want: deadFoundMetric},
		{name: "counter of another agent is not compared", edit: func(s *deathSeen) { s.deadFound, s.sameAgent = 0, false }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := good
			c.edit(&s)
			got := w.deathProblems(s)
			switch {
			case c.want == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case c.want != "" && (len(got) != 1 || !strings.Contains(got[0], c.want)):
				t.Errorf("problems %q, want one naming %q", got, c.want)
			}
		})
	}
	// Plain IDs (kernels before 6.8) decide only with the device: a reused plain ID on another
	// FUSE connection is another mount.
	plainA := mountIdentity{ID: 812, PlainID: 812, Dev: "0:91"}
	if sameMount(plainA, mountIdentity{ID: 812, PlainID: 812, Dev: "0:95"}) {
		t.Error("a reused plain mount ID on another device was taken for the same mount")
	}
	if !sameMount(plainA, plainA) {
		t.Error("the same plain mount ID and device was taken for another mount")
	}
}

// TestMountIdentityOnThisKernel (root): topMountIdentity on real mounts. An untouched mount keeps
// its identity; a new mount at the same path gets another one, even when the kernel hands it
// the freed plain mount ID again (logged: that reuse is why the unique ID is compared); a killed
// process is no longer running.
func TestMountIdentityOnThisKernel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it mounts tmpfs): run the e2e layer as root, e.g. sudo make e2e")
	}
	dir := t.TempDir()
	mount := func() {
		t.Helper()
		if err := unix.Mount("witness", dir, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatalf("mount tmpfs at %s: %v", dir, err)
		}
	}
	unmount := func() {
		t.Helper()
		if err := unix.Unmount(dir, 0); err != nil {
			t.Fatalf("unmount %s: %v", dir, err)
		}
	}
	mount()
	a, err := topMountIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	again, err := topMountIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !sameMount(a, again) {
		t.Errorf("one untouched mount gave two identities: %s, %s", a, again)
	}
	unmount()
	mount()
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	b, err := topMountIdentity(dir)
	if err != nil {
		t.Fatal(err)
	}
	if sameMount(a, b) {
		t.Errorf("a new mount at %s was taken for the old one: %s, %s", dir, a, b)
	}
	if !a.Unique {
		t.Logf("this kernel has no STATX_MNT_ID_UNIQUE (Linux < 6.8): plain mount IDs compared with the device")
	}
	t.Logf("before: %s; after a new mount at the same path: %s; plain mount ID reused: %t", a, b, a.PlainID == b.PlainID)

	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ps := procIDs([]int{cmd.Process.Pid})
	if got := stillRunning(ps); len(ps) != 1 || len(got) != 1 {
		t.Fatalf("a running sleep %d: procIDs %v, still running %v", cmd.Process.Pid, ps, got)
	}
	_ = cmd.Process.Kill()
	// Not reaped yet: a zombie is dead, not running.
	time.Sleep(100 * time.Millisecond)
	if got := stillRunning(ps); len(got) != 0 {
		t.Errorf("killed sleep %d reported still running", cmd.Process.Pid)
	}
	_ = cmd.Wait()
}

// TestCmdlineNamesSource: s3fs's own rewrite of "bucket:/prefix" (two arguments) is found, as is a
// plain bucket; another prefix, or the bucket as an option's value, is not.
func TestCmdlineNamesSource(t *testing.T) {
	for _, c := range []struct {
		cmd, src string
		want     bool
	}{
		{"s3fs\x00e2e-bucket\x00/yandex\x00/mnt/t\x00-o\x00ro\x00", "e2e-bucket:/yandex", true},
		{"s3fs\x00e2e-bucket:/yandex\x00/mnt/t\x00", "e2e-bucket:/yandex", true},
		{"s3fs\x00e2e-bucket\x00/mnt/t\x00", "e2e-bucket", true},
		{"s3fs\x00e2e-bucket\x00/other\x00/mnt/t\x00", "e2e-bucket:/yandex", false},
		{"s3fs\x00-o\x00bucket=e2e-bucket\x00/mnt/t\x00", "e2e-bucket", false},
		{"e2e-bucket\x00/yandex\x00", "e2e-bucket:/yandex", false}, // argv[0] is the program
	} {
		if got := cmdlineNamesSource([]byte(c.cmd), c.src); got != c.want {
			t.Errorf("cmdlineNamesSource(%q, %q) = %t, want %t", c.cmd, c.src, got, c.want)
		}
	}
}
