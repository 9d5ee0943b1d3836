//go:build node

package s3mount_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

// A PV name of the API's maximum length (253) goes through the S3 rescue on a real node: the
// bridge's mount, passwd file, tmp dir, log and record are bounded names, the app writes
// through it to the bucket, and a restarted agent adopts the bridge under the PV's full name
// (same s3fs, nothing stacked, counted as active).
func TestNodeLongPVName(t *testing.T) {
	e := newNodeEnv(t)
	pv := strings.Repeat("l", 120) + "." + strings.Repeat("n", 132)
	if len(pv) != 253 {
		t.Fatalf("PV name of %d characters, want 253", len(pv))
	}
	e.volume(pv, nil, false)
	pod := e.pod("app-long", pv)
	target, driverProc := e.publish(pod, pv)
	_, stop := e.agent(30 * time.Second)
	served := topMountID(target)
	must(t, driverProc.Signal(syscall.SIGKILL))
	waitFor(t, 30*time.Second, "target restored", func() bool {
		return restoredSince(target, served) && len(stackAt(target)) == 1 // the bridge bind replaced the dead mount
	})

	l := s3fs.Layout{StateDir: e.state}
	for _, p := range []string{l.MountPoint(pv), l.PasswdFile(pv), l.TmpDir(pv), l.LogFile(pv), l.BridgeRecordFile(pv)} {
		if n := len(filepath.Base(p)); n > 255 {
			t.Errorf("%s: a name of %d bytes", p, n)
		}
		if _, err := os.Stat(p); err != nil {
			t.Errorf("bridge file: %v", err)
		}
	}
	must(t, os.WriteFile(filepath.Join(target, "long.txt"), []byte("long\n"), 0o644))
	waitFor(t, 20*time.Second, "the app's file in the bucket", func() bool {
		b, err := os.ReadFile(filepath.Join(e.s3dir, bucket, pv, "long.txt"))
		return err == nil && string(b) == "long\n"
	})

	bridge := l.MountPoint(pv)
	r2, _ := e.restartKeepsBridge(stop, bridge, target)
	if got := counterValue(t, r2.Metrics().BridgesActive); got != 1 {
		t.Errorf("bridges active after the restart %v, want 1 (adopted under the PV's full name)", got)
	}
	if _, err := os.Stat(l.BridgeRecordFile(pv)); err != nil {
		t.Errorf("the adopted bridge's record: %v (retired as unused?)", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(target, &st); err != nil {
		t.Errorf("target after the restart: %v", err)
	}
}
