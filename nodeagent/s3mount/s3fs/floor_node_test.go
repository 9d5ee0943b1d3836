//go:build node

package s3fs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// A node whose temporary files' filesystem has less free than the bridges' floor: s3fs 1.90
// refuses to start with the floor as ensure_diskfree (the e2e bridges of a CI run failed so, every
// one), and starts with the floor StartableFloorMB gives; a file written through it reads back.
// Real s3fs against a real S3 server, on a 256 MB tmpfs filled to leave ~150 MB.
func TestNodeBridgeStartsOnAFilesystemShortOfTheFloor(t *testing.T) {
	testenv.RequireRoot(t)
	tmpRoot := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.MkdirAll(tmpRoot, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", tmpRoot, "tmpfs", 0, "size=256m"); err != nil {
		t.Fatalf("mount a tmpfs for the bridge's temporary files: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(tmpRoot, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(tmpRoot, "filler"), make([]byte, 106<<20), 0o600); err != nil {
		t.Fatalf("fill the tmpfs: %v", err)
	}
	const floorMB = 1024 // s3.bridgeDiskFreeMB's default, above all this filesystem has
	_, avail := fsSpace(tmpRoot)
	if avail < 100 || avail > 160 {
		t.Fatalf("premise: ~150 MB free on the tmpfs, statvfs says %d MB", avail)
	}
	srv := testenv.S3(t, "bkt")
	start := func(floor int64) (*testenv.S3fsMount, error) {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		return testenv.StartS3fs(ctx, srv.S3Config, testenv.S3fsSpec{Source: "bkt", MountPoint: filepath.Join(dir, "mnt"),
			PasswdFile: filepath.Join(dir, "passwd"), Options: []string{"tmpdir=" + tmpRoot, "ensure_diskfree=" + strconv.FormatInt(floor, 10)}})
	}

	if m, err := start(floorMB); err == nil {
		m.Kill()
		_ = testenv.LazyUnmount(m.MountPoint)
		t.Fatalf("premise: s3fs started with ensure_diskfree=%d and %d MB free; this test shows nothing on this s3fs", floorMB, avail)
	} else if !strings.Contains(err.Error(), "no enough disk space") {
		t.Fatalf("premise: s3fs should refuse the floor for want of disk space, said: %v", err)
	}

	floor, lowered := StartableFloorMB(floorMB, avail, nil)
	if !lowered {
		t.Fatalf("StartableFloorMB(%d, %d free) kept the floor", floorMB, avail)
	}
	m, err := start(floor)
	if err != nil {
		t.Fatalf("s3fs with the startable floor %d MB (%d free): %v", floor, avail, err)
	}
	t.Cleanup(func() {
		m.Kill()
		_ = testenv.LazyUnmount(m.MountPoint)
	})
	data := bytes.Repeat([]byte("bridged on a full node\n"), 4096)
	if err := os.WriteFile(filepath.Join(m.MountPoint, "f"), data, 0o644); err != nil {
		t.Fatalf("write through the bridge: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(m.MountPoint, "f")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back through the bridge: %d bytes, %v; want %d bytes", len(got), err, len(data))
	}
	t.Logf("%d MB free, floor %d MB: s3fs refused it, started with %d MB and served a write and a read", avail, floorMB, floor)
}
