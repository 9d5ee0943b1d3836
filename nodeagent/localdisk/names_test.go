package localdisk_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/pvrescue/pvrescue/internal/statename"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk/localdisktest"
)

// A PV name of 253 characters (the API's limit) gets a fake, its record is found again by a new
// reconciler (an agent restart), and it is retired when its PV goes; every state file name stays
// within NAME_MAX with its temporary form. Short names keep the names earlier agents wrote.
func TestLongPVNameThroughTheRescue(t *testing.T) {
	long := strings.Repeat("p", 200) + "." + strings.Repeat("q", 52)
	if len(long) != 253 {
		t.Fatalf("name of %d characters", len(long))
	}
	h := localdisktest.NewFakeOS(testState, "/dev")
	r := newTestReconciler(t, h)
	vol := localdisk.Volume{PV: long, Path: testDisk, MayFake: true}
	if st := one(t, r.Sync(ctxFor(t), []localdisk.Volume{vol}, true)); st.State != localdisk.StateFaked || st.Err != nil {
		t.Fatalf("status %+v", st)
	}
	var names []string
	for p := range h.Files {
		if localdisk.InDir(testState, p) {
			names = append(names, filepath.Base(p))
			if n := len("." + filepath.Base(p) + ".tmp"); n > statename.NameMax {
				t.Errorf("state file %q: its temporary name is %d bytes", filepath.Base(p), n)
			}
		}
	}
	if len(names) != 2 {
		t.Fatalf("state files %q, want a record and an image", names)
	}
	noViolations(t, h)

	// A new reconciler (the agent restarted) reads the record back under the PV's full name.
	r2 := newTestReconciler(t, h)
	recs, err := r2.Records()
	if err != nil || recs[long] != testDisk || len(recs) != 1 {
		t.Fatalf("records after restart = %v, %v; want the long PV with its path", recs, err)
	}
	// The image is the record's, not an orphan: a pass keeps it.
	if st := one(t, r2.Sync(ctxFor(t), []localdisk.Volume{vol}, true)); st.State != localdisk.StateFaked || st.Created {
		t.Fatalf("status after restart %+v", st)
	}
	// The PV goes: its fake is retired and nothing is left.
	res := r2.Sync(ctxFor(t), nil, true)
	if len(res.Retired) != 1 || !res.Retired[0].Done {
		t.Fatalf("retire %+v", res)
	}
	nothingLeft(t, h)
	noViolations(t, h)

	// Short names are unchanged: "pv1.json" and "pv1.img" as before.
	if got := filepath.Base(r.RecordPath("pv1")) + " " + filepath.Base(r.ImagePath("pv1")); got != "pv1.json pv1.img" {
		t.Errorf("short name files %s", got)
	}
}
