//go:build node

package fusewatch

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A tenant holds open a file named fuse on a FUSE volume whose daemon hangs (SIGSTOP: every
// request to it waits): a walk for /dev/fuse holders still ends at once, because it never stats
// or opens what a descriptor points to. (A walk that stat'ed every descriptor named fuse hung
// here until the daemon was resumed.)
func TestNodeWalkIgnoresTenantFileOnHungVolume(t *testing.T) {
	rclone, mnt := rcloneMount(t)
	p := filepath.Join(mnt, "fuse")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tenant := exec.Command("sh", "-c", "exec 3<"+p+"; exec sleep 60")
	if err := tenant.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tenant.Process.Kill(); _ = tenant.Wait() }()
	// The descriptor is open before the daemon stops.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if l, err := os.Readlink("/proc/" + strconv.Itoa(tenant.Process.Pid) + "/fd/3"); err == nil && l == p {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tenant did not open %s", p)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := rclone.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = rclone.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()
	time.Sleep(1500 * time.Millisecond) // rclone's attribute cache (1 s) expires: a getattr reaches the daemon
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := NewOS(OSOptions{}).Holders()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("walk with a tenant's file named fuse on a stopped FUSE daemon: %v", time.Since(start))
	case <-time.After(5 * time.Second):
		resume() // let the hung walk finish
		if err := <-done; err != nil {
			t.Logf("the hung walk ended with %v", err)
		}
		t.Fatalf("the walk hung on the tenant's file %s (stopped daemon) for more than 5s; it ended only after SIGCONT, %v after it began", p, time.Since(start))
	}
}
