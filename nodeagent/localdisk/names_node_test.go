//go:build node

package localdisk_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pvrescue/pvrescue/internal/statename"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
)

// A PV name of the API's maximum length (253 characters) through the rescue on real loops: the
// fake is made (record and image named within NAME_MAX), found again by a new reconciler, and
// retired when the PV goes, leaving nothing.
func TestNodeLongPVName(t *testing.T) {
	e := setupLayout(t)
	long := strings.Repeat("l", 200) + "." + strings.Repeat("m", 52)
	p := filepath.Join(e.byID, "nvme-long")
	st := one(t, e.r.Sync(logrCtx(t), []localdisk.Volume{{PV: long, Path: p, MayFake: true}}, true))
	if st.State != localdisk.StateFaked || st.Err != nil {
		t.Fatalf("status %+v", st)
	}
	if got := ourLinkTarget(p); got != fmt.Sprintf("/dev/loop%d", st.Loop) {
		t.Fatalf("link -> %q", got)
	}
	names, err := os.ReadDir(filepath.Join(e.state, localdisk.SubDir))
	if err != nil || len(names) != 2 {
		t.Fatalf("state dir: %v %v, want a record and an image", names, err)
	}
	for _, n := range names {
		if len("."+n.Name()+".tmp") > statename.NameMax {
			t.Errorf("state file %q too long for its temporary name", n.Name())
		}
	}
	// An agent restart: a new reconciler finds the record under the full PV name.
	r2, err := localdisk.NewReconciler(e.host, e.r.Options(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if recs, err := r2.Records(); err != nil || recs[long] != p {
		t.Fatalf("records %v %v", recs, err)
	}
	res := r2.Sync(logrCtx(t), nil, true)
	if len(res.Retired) != 1 || !res.Retired[0].Done {
		t.Fatalf("retire %+v", res)
	}
	if names, _ := os.ReadDir(filepath.Join(e.state, localdisk.SubDir)); len(names) != 0 {
		t.Errorf("left in the state dir: %v", names)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Errorf("fake link left: %v", err)
	}
}
