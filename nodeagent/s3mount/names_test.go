package s3mount

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/pvrescue/pvrescue/internal/statename"
)

// Every per-PV name of ours stays one component within NAME_MAX (with a temporary file's "." and
// ".tmp") for a PV name of the API's maximum length; short names are those earlier agents used.
func TestPerPVNamesBounded(t *testing.T) {
	l := Layout{StateDir: "/var/lib/pvrescue"}
	long := strings.Repeat("v", 120) + "." + strings.Repeat("w", 132)
	if len(long) != 253 {
		t.Fatalf("%d characters", len(long))
	}
	for _, tc := range []struct {
		what, path, root string
		reserve          int // what is added around the name (a temporary file's "." and ".tmp")
	}{
		{"staging", l.Staging(long), l.StagingRoot(), 0},
		{"passwd", l.PasswdFile(long), l.CredsDir(), 0},
		{"tmp", l.TmpDir(long), l.TmpRoot(), 0},
		{"record", l.BridgeRecordFile(long), l.BridgesDir(), 0},
		{"log", l.LogFile(long), l.LogDir(), 0},
		{"cgroup", "/" + BridgeCgroup("pvrescue/s3", long, 4194304), "/pvrescue/s3", -len("..tmp")},
	} {
		dir, name := filepath.Split(tc.path)
		if filepath.Clean(dir) != tc.root || len("."+name+".tmp")+tc.reserve > statename.NameMax || strings.ContainsAny(name, "/\x00") {
			t.Errorf("%s: %q (%d bytes) not one bounded component under %s", tc.what, tc.path, len(name), tc.root)
		}
	}
	if pv, ok := l.PVFromStaging(l.Staging(long)); !ok || l.Staging(pv) != l.Staging(long) {
		t.Errorf("staging stem %q does not map back to the same path", pv)
	}
	if pv, ok := PVFromBridgeRecord(filepath.Base(l.BridgeRecordFile(long))); !ok || l.BridgeRecordFile(pv) != l.BridgeRecordFile(long) {
		t.Errorf("record stem %q does not map back to the same file", pv)
	}
	for got, want := range map[string]string{
		l.Staging("pv1"): "/var/lib/pvrescue/s3/staging/pv1", l.BridgeRecordFile("pv1"): "/var/lib/pvrescue/s3/bridges/pv1.json",
		l.PasswdFile("pv1"): "/var/lib/pvrescue/s3/creds/pv1.passwd", BridgeCgroup("pvrescue/s3", "pv1", 42): "pvrescue/s3/pv1-42",
		l.LogFile("pv1"): "/var/lib/pvrescue/s3/log/pv1.log", l.TmpDir("pv1"): "/var/lib/pvrescue/s3/tmp/pv1",
	} {
		if got != want {
			t.Errorf("short name: %q, want %q (as earlier agents named it)", got, want)
		}
	}
}
