package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Loop device numbers: the agent owns 101 up to 101+loopSearchLimit (256 by default: 101–356), and
// a link it recorded that points into that range counts as its own (stale) link. Tests and tools
// therefore attach their "real" disks in ranges above it, or the agent would take a returning test
// disk for one of its stale fakes.
var (
	// TestLoops is the range node tests and the e2e suite attach their loop devices in.
	TestLoops = LoopRange{First: 400, Last: 499}
	// BenchLoops is the range hack/bench attaches its loop devices in.
	BenchLoops = LoopRange{First: 500, Last: 529}
)

// LoopMajor is the block major number of loop devices.
const LoopMajor = 7

// ErrNoFreeLoop is returned when every loop device of a range is in use.
var ErrNoFreeLoop = errors.New("no free loop device in range")

// LoopRange is an inclusive range of loop minor numbers a caller owns.
type LoopRange struct{ First, Last int }

func (r LoopRange) String() string { return fmt.Sprintf("loop%d..loop%d", r.First, r.Last) }

// Contains reports whether minor lies in the range.
func (r LoopRange) Contains(minor int) bool { return minor >= r.First && minor <= r.Last }

// Loop is a loop device attached by AttachLoop. Detach undoes exactly what AttachLoop did: it
// clears the device and removes the /dev node and the kernel device if AttachLoop created them.
type Loop struct {
	Minor int
	Dev   string // /dev/loopN
	Image string

	madeNode  bool
	addedLoop bool
}

// LoopDevice creates a sparse image of size bytes in dir (a test temp dir), attaches it to a free
// loop device in TestLoops, and detaches it (removing what it created) when the test ends.
func LoopDevice(t testing.TB, dir string, size int64) *Loop {
	t.Helper()
	RequireRoot(t)
	f, err := os.CreateTemp(dir, "img-*")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		_ = f.Close() // the truncate's error is the one reported
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return AttachLoopT(t, f.Name(), TestLoops)
}

// AttachLoopT attaches image to a free loop device in r for a test and detaches it when the test
// ends. A one-number range attaches exactly that device (and fails when it is in use).
func AttachLoopT(t testing.TB, image string, r LoopRange) *Loop {
	t.Helper()
	RequireRoot(t)
	l, err := AttachLoop(image, r)
	if err != nil {
		t.Fatalf("attach %s: %v", image, err)
	}
	t.Cleanup(func() {
		if err := l.Detach(); err != nil {
			t.Errorf("detach %s: %v", l.Dev, err)
		}
	})
	return l
}

// LoopNodesT removes, when the test ends, the /dev/loopN nodes in r that appeared during the test
// and are not attached then: nodes the code under test (the agent) made with mknod.
func LoopNodesT(t testing.TB, r LoopRange) {
	t.Helper()
	remove := NewLoopNodes(r)
	t.Cleanup(func() {
		if _, err := remove(); err != nil {
			t.Errorf("remove loop nodes in %s: %v", r, err)
		}
	})
}

// NewLoopNodes notes the /dev/loopN nodes in r that exist now; the function it returns removes
// the ones that appeared since and are not attached (and their unbound kernel devices).
func NewLoopNodes(r LoopRange) func() ([]string, error) {
	before := map[int]bool{}
	for n := r.First; n <= r.Last; n++ {
		if _, err := os.Lstat(LoopDevPath(n)); err == nil {
			before[n] = true
		}
	}
	return func() ([]string, error) {
		return RemoveLoopNodes(r, func(minor int) bool { return before[minor] })
	}
}

// LoopDevPath is /dev/loopN.
func LoopDevPath(minor int) string { return filepath.Join("/dev", fmt.Sprintf("loop%d", minor)) }
