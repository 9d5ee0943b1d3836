package s3mount

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/statename"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

// Every per-PV name of ours stays one component within NAME_MAX (with a temporary file's "." and
// ".tmp") for a PV name of the API's maximum length; short names are those earlier agents used.
func TestPerPVNamesBounded(t *testing.T) {
	l := s3fs.Layout{StateDir: "/var/lib/pvrescue"}
	long := strings.Repeat("v", 120) + "." + strings.Repeat("w", 132)
	if len(long) != 253 {
		t.Fatalf("%d characters", len(long))
	}
	for _, tc := range []struct {
		what, path, root string
		reserve          int // what is added around the name (a temporary file's "." and ".tmp")
	}{
		{"bridge mount point", l.MountPoint(long), l.MountRoot(), 0},
		{"passwd", l.PasswdFile(long), l.CredsDir(), 0},
		{"tmp", l.TmpDir(long), l.TmpRoot(), 0},
		{"record", l.BridgeRecordFile(long), l.BridgesDir(), 0},
		{"log", l.LogFile(long), l.LogDir(), 0},
		{"cgroup", "/" + s3fs.BridgeCgroup("pvrescue/s3", long, 4194304), "/pvrescue/s3", -len("..tmp")},
	} {
		dir, name := filepath.Split(tc.path)
		if filepath.Clean(dir) != tc.root || len("."+name+".tmp")+tc.reserve > statename.NameMax || strings.ContainsAny(name, "/\x00") {
			t.Errorf("%s: %q (%d bytes) not one bounded component under %s", tc.what, tc.path, len(name), tc.root)
		}
	}
	if pv, ok := l.PVFromMountPoint(l.MountPoint(long)); !ok || l.MountPoint(pv) != l.MountPoint(long) {
		t.Errorf("bridge mount point stem %q does not map back to the same path", pv)
	}
	if pv, ok := s3fs.PVFromBridgeRecord(filepath.Base(l.BridgeRecordFile(long))); !ok || l.BridgeRecordFile(pv) != l.BridgeRecordFile(long) {
		t.Errorf("record stem %q does not map back to the same file", pv)
	}
	// The bridges' directory stays "staging" on disk: a new agent adopts the bridges an older
	// one left there.
	for got, want := range map[string]string{
		l.MountPoint("pv1"): "/var/lib/pvrescue/s3/staging/pv1", l.BridgeRecordFile("pv1"): "/var/lib/pvrescue/s3/bridges/pv1.json",
		l.PasswdFile("pv1"): "/var/lib/pvrescue/s3/creds/pv1.passwd", s3fs.BridgeCgroup("pvrescue/s3", "pv1", 42): "pvrescue/s3/pv1-42",
		l.LogFile("pv1"): "/var/lib/pvrescue/s3/log/pv1.log", l.TmpDir("pv1"): "/var/lib/pvrescue/s3/tmp/pv1",
	} {
		if got != want {
			t.Errorf("short name: %q, want %q (as earlier agents named it)", got, want)
		}
	}
}

// A bridge of a PV whose name is too long for our file names (hashed there, whole in the mount's
// fsname and in the record) is adopted by a restarted agent under its full name: it keeps
// serving the pod, is not retired as unused, and goes when the pod goes.
func TestLongPVBridgeAdoptedAcrossAgentRestart(t *testing.T) {
	l := s3fs.Layout{StateDir: testState}
	pv := strings.Repeat("p", 253)
	w := newWorld(t, secretObj("creds", goodSecret), storageClass(), pvObj(pv, testDriver, false),
		pvcObj("data", pv), podObj("app", "uid-1", "data", false))
	target := w.publish("uid-1", pv)
	w.node.KillMount(target)
	w.start()
	w.waitFor("bridged", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	if _, _, ok := w.node.File(l.BridgeRecordFile(pv)); !ok {
		t.Fatalf("no bridge record at %s", l.BridgeRecordFile(pv))
	}

	w.start()
	w.settle()
	if n := len(w.node.Started()); n != 1 {
		t.Errorf("s3fs started after restart: %d in total, want 1 (adopted, not re-bridged)", n)
	}
	if p := w.node.Processes()[0]; p.Exited() {
		t.Fatal("the adopted bridge of a long-named PV was retired while its pod runs on it")
	}
	if got := value(t, w.r.Metrics().BridgesActive); got != 1 {
		t.Errorf("bridges active after adoption %v, want 1", got)
	}
	if _, _, ok := w.node.File(l.BridgeRecordFile(pv)); !ok {
		t.Error("the adopted bridge's record is gone: it was retired as unused while its pod runs on it")
	}
	if n := len(w.node.Table().Stack(target)); n != 2 {
		t.Errorf("target stack %d, want 2", n)
	}
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target after restart: %v", err)
	}

	w.view.DeletePod("default", "app")
	w.waitFor("adopted bridge retired", func() bool {
		_, _, rec := w.node.File(l.BridgeRecordFile(pv))
		return w.node.Processes()[0].Exited() && !rec && leftForTheDriver(w, target)
	})
	strictUnpublish(t, w, target)
}
