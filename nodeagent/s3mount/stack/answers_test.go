package stack

import (
	"context"
	"io/fs"
	"syscall"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// Two dead driver mounts at two pods' targets, and our bridge's staging mount (private).
const twoTargetsFixture = `26 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
41 26 0:38 / /k/pods/a/volumes/kubernetes.io~csi/pv/mount rw,nosuid,nodev,relatime shared:7 - fuse.s3fs s3fs rw
42 26 0:38 / /k/pods/b/volumes/kubernetes.io~csi/pv/mount rw,nosuid,nodev,relatime shared:8 - fuse.s3fs s3fs rw
60 26 0:60 / /state/s3/staging/pv rw,nosuid,nodev,relatime - fuse pvrescue-s3:pv rw
`

const bridgeSource = "/state/s3/staging/pv"

// countingStatfs answers for every path but the targets not yet replaced, and counts the calls
// by path.
type countingStatfs struct {
	replaced map[string]bool
	calls    map[string]int
}

func (s *countingStatfs) Statfs(_ context.Context, p string, _ time.Duration) error {
	s.calls[p]++
	if p != bridgeSource && !s.replaced[p] {
		return syscall.ENOTCONN
	}
	return nil
}

// markingReplacer replaces at once and marks the target live.
type markingReplacer struct{ replaced map[string]bool }

func (m markingReplacer) Replace(_, target string, _ int, _, _ bool, _ Table) (mountreplace.Result, error) {
	m.replaced[target] = true
	return mountreplace.Result{Mode: mountreplace.Beneath, New: 70}, nil
}

// A pass puts one bridge mount over each of its targets: with the pass's Answers, the bridge's
// daemon is asked once, not once per target (each ask is a FUSE request queued behind the
// pods' own reads), and a target a Replacer verified is not asked again. Without it (a replay,
// whose source is a fresh mount per target), every check asks as before.
func TestCoverAsksTheBridgeOncePerPass(t *testing.T) {
	targets := []string{"/k/pods/a/volumes/kubernetes.io~csi/pv/mount", "/k/pods/b/volumes/kubernetes.io~csi/pv/mount"}
	for _, tc := range []struct {
		name           string
		answers        *Answers
		replacer       bool
		source, target int // statfs calls expected at the source and at each target
	}{
		{"pass memory and a replacer", NewAnswers(), true, 1, 1},
		{"no memory", nil, true, 2, 2},
		{"pass memory, bound on top without a replacer", NewAnswers(), false, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := ParseMountInfo(twoTargetsFixture)
			if err != nil {
				t.Fatal(err)
			}
			replaced := map[string]bool{}
			st := &countingStatfs{replaced: replaced, calls: map[string]int{}}
			r := &Rules{Mounter: &replaceMounter{table: tab, replaced: new(bool)}, Statfs: st,
				StatfsTimeout: func() time.Duration { return time.Second }, Placed: NewPlaced(memFS{}, "/state/placed.json")}
			if tc.replacer {
				r.Replacer = markingReplacer{replaced}
			}
			for _, p := range targets {
				if !tc.replacer {
					r.Mounter = &bindMarker{replaceMounter{table: tab, replaced: new(bool)}, func() { replaced[p] = true }}
				}
				_, _, ok, err := r.Cover(context.Background(), bridgeSource, p, false, func(tab Table) Check {
					c := CheckFor(tab, p, "fuse.s3fs")
					c.FUSETypes = append(c.FUSETypes, OurFUSETypes...)
					c.Answered = tc.answers
					return c
				})
				if err != nil || !ok {
					t.Fatalf("Cover %s: ok %v, %v", p, ok, err)
				}
			}
			if got := st.calls[bridgeSource]; got != tc.source {
				t.Errorf("statfs of the bridge's mount: %d calls, want %d", got, tc.source)
			}
			for _, p := range targets {
				// One call finds the target dead before anything is done; any further one asks
				// the new mount.
				if got := st.calls[p] - 1; got != tc.target {
					t.Errorf("statfs of %s after it was found dead: %d calls, want %d", p, got, tc.target)
				}
			}
		})
	}
}

// bindMarker binds like replaceMounter and marks the target live.
type bindMarker struct {
	replaceMounter
	mark func()
}

func (b *bindMarker) Bind(source, target string, ro bool) error {
	b.mark()
	return b.replaceMounter.Bind(source, target, ro)
}

// The memory knows a mount by ID and device: another mount at the source (the bridge
// restarted within the pass) is asked again.
func TestAnswersKnowAMountByIDAndDevice(t *testing.T) {
	a := NewAnswers()
	m := Mount{ID: 60, Dev: "0:60"}
	if a.Has(m) {
		t.Fatal("an empty memory has a mount")
	}
	a.add(m)
	for _, tc := range []struct {
		m    Mount
		want bool
	}{
		{m, true},
		{Mount{ID: 61, Dev: "0:60"}, false},
		{Mount{ID: 60, Dev: "0:61"}, false},
	} {
		if got := a.Has(tc.m); got != tc.want {
			t.Errorf("Has(%+v) = %v, want %v", tc.m, got, tc.want)
		}
	}
	var none *Answers
	none.add(m)
	if none.Has(m) {
		t.Error("a nil memory remembers")
	}
}

// countingFS counts writes by path.
type countingFS struct {
	memFS
	writes map[string]int
}

func (c countingFS) WriteFile(p string, d []byte, m fs.FileMode) error {
	c.writes[p]++
	return c.memFS.WriteFile(p, d, m)
}

// Every change of the record is written at once and reads back as made; a Forget of a path not
// recorded writes nothing.
func TestPlacedWritesEachChange(t *testing.T) {
	const file = "/state/placed.json"
	fsys := countingFS{memFS{}, map[string]int{}}
	p := NewPlaced(fsys, file)
	for _, path := range []string{"/t/a", "/t/b", "/t/c"} {
		if err := p.Put(path, "0:60"); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Forget("/t/c"); err != nil || fsys.writes[file] != 4 {
		t.Fatalf("after 3 Puts and a Forget: %d writes (%v), want 4", fsys.writes[file], err)
	}
	if err := p.Forget("/t/none"); err != nil || fsys.writes[file] != 4 {
		t.Errorf("Forget of a path not recorded: %d writes (%v), want none", fsys.writes[file], err)
	}
	loaded := NewPlaced(fsys, file)
	if err := loaded.Load(); err != nil {
		t.Fatal(err)
	}
	if loaded.Dev("/t/a") != "0:60" || loaded.Dev("/t/b") != "0:60" || loaded.Dev("/t/c") != "" {
		t.Errorf("written record: a %q, b %q, c %q; want a and b, not c", loaded.Dev("/t/a"), loaded.Dev("/t/b"), loaded.Dev("/t/c"))
	}
}
