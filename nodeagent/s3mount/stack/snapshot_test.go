package stack

import (
	"context"
	"errors"
	"testing"
	"time"
)

// identifiedMounter is a replaceMounter whose tops have unique IDs: ids by path, the table's
// top ID unless set.
type identifiedMounter struct {
	*replaceMounter
	ids map[string]uint64
}

func (m identifiedMounter) TopUniqueID(path string) (uint64, error) {
	if id, ok := m.ids[path]; ok {
		return id, nil
	}
	top, ok := m.table.Top(path)
	if !ok {
		return 0, errors.New("not mounted")
	}
	return uint64(top.ID), nil //nolint:gosec // G115: fixture IDs are small and positive
}

// A pass covers its targets with one read of the mount table (the snapshot) instead of one per
// target; a target whose top changed since (another ID) reads a fresh table; without unique IDs
// every target reads its own, as before.
func TestCoverUsesThePassSnapshot(t *testing.T) {
	targets := []string{"/k/pods/a/volumes/kubernetes.io~csi/pv/mount", "/k/pods/b/volumes/kubernetes.io~csi/pv/mount"}
	for _, tc := range []struct {
		name    string
		ids     bool
		changed string // a target whose top changes after the snapshot
		reads   int    // tables read in all, the snapshot's included
	}{
		{"unique IDs", true, "", 1},
		{"a top changed after the snapshot", true, targets[1], 2},
		{"no unique IDs", false, "", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := ParseMountInfo(twoTargetsFixture)
			if err != nil {
				t.Fatal(err)
			}
			replaced := map[string]bool{}
			rm := &replaceMounter{table: tab, replaced: new(bool)}
			var m Mounter = rm
			im := identifiedMounter{rm, map[string]uint64{}}
			if tc.ids {
				m = im
			}
			r := &Rules{Mounter: m, Statfs: &countingStatfs{replaced: replaced, calls: map[string]int{}},
				StatfsTimeout: func() time.Duration { return time.Second }, Placed: NewPlaced(memFS{}, "/state/placed.json"),
				Replacer: markingReplacer{replaced}}
			snap, err := r.Snapshot(append([]string{bridgeSource}, targets...))
			if err != nil {
				t.Fatal(err)
			}
			if tc.changed != "" {
				im.ids[tc.changed] = 9999 // another mount on top now (the table still says 42)
			}
			for _, p := range targets {
				_, _, ok, err := r.Cover(context.Background(), bridgeSource, p, false, func(tab Table) Check {
					c := CheckFor(tab, p, "fuse.s3fs")
					c.FUSETypes = append(c.FUSETypes, OurFUSETypes...)
					return c
				}, snap)
				if err != nil || !ok {
					t.Fatalf("Cover %s: ok %v, %v", p, ok, err)
				}
			}
			if rm.reads != tc.reads {
				t.Errorf("mount tables read: %d, want %d", rm.reads, tc.reads)
			}
		})
	}
}

// A top that changes while the table is read is not known to the snapshot: Cover reads its own
// table for that path.
func TestSnapshotForgetsATopThatChangedDuringTheRead(t *testing.T) {
	tab, err := ParseMountInfo(twoTargetsFixture)
	if err != nil {
		t.Fatal(err)
	}
	const target = "/k/pods/a/volumes/kubernetes.io~csi/pv/mount"
	rm := &replaceMounter{table: tab, replaced: new(bool)}
	im := &racingIDs{identifiedMounter{rm, map[string]uint64{}}, target}
	r := &Rules{Mounter: im}
	snap, err := r.Snapshot([]string{bridgeSource, target})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.tableFor(bridgeSource); !ok {
		t.Error("the snapshot does not hold for the source, whose top stayed")
	}
	if _, ok := snap.tableFor(bridgeSource, target); ok {
		t.Error("the snapshot holds for a target whose top changed while the table was read")
	}
	var none *Snapshot
	if _, ok := none.tableFor(target); ok {
		t.Error("a nil snapshot holds")
	}
}

// racingIDs gives path another top ID once the table was read.
type racingIDs struct {
	identifiedMounter
	path string
}

func (m *racingIDs) MountTable() (Table, error) {
	t, err := m.identifiedMounter.MountTable()
	m.ids[m.path] = 777
	return t, err
}
