//go:build node

package sidecar

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// sysfsLoopMinor is this test's own loop number (outside the agent's and other tests' ranges).
const sysfsLoopMinor = 391

// attachTestLoop makes loop minor exist (LOOP_CTL_ADD + mknod: a fresh machine has only
// loop0-7 and no udev), binds image to it, and undoes all of it when the test ends.
func attachTestLoop(t *testing.T, image string, minor int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (loop devices): run under sudo, as CI does")
	}
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("/dev/loop-control: %v (modprobe loop)", err)
	}
	_ = unix.IoctlSetInt(int(ctl.Fd()), unix.LOOP_CTL_ADD, minor)
	ctl.Close()
	node := fmt.Sprintf("/dev/loop%d", minor)
	made := false
	if _, err := os.Stat(node); os.IsNotExist(err) {
		if err := unix.Mknod(node, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(minor)))); err != nil {
			t.Fatal(err)
		}
		made = true
	}
	img, err := os.OpenFile(image, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	dev, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(img.Fd())); err != nil {
		t.Fatalf("LOOP_SET_FD %s: %v", node, err)
	}
	t.Cleanup(func() {
		if d, err := os.OpenFile(node, os.O_RDWR, 0); err == nil {
			_ = unix.IoctlSetInt(int(d.Fd()), unix.LOOP_CLR_FD, 0)
			d.Close()
		}
		if made {
			_ = os.Remove(node)
		}
	})
	return node
}

// A non-root guard (uid 65532, as the helper image runs) tells a 512-byte fake from a disk
// without opening the device node (root 0660): it reads sysfs.
func TestNodeGuardSizesAsNonRoot(t *testing.T) {
	if dev := os.Getenv("PVRESCUE_SIZE_OF"); dev != "" {
		size, err := RealDeps().Devices.DeviceSize(dev)
		fmt.Printf("uid=%d size=%d err=%v\n", os.Getuid(), size, err)
		return
	}
	image := filepath.Join(t.TempDir(), "fake.img")
	if err := os.WriteFile(image, make([]byte, 512), 0o600); err != nil {
		t.Fatal(err)
	}
	node := attachTestLoop(t, image, sysfsLoopMinor)
	if err := os.Chmod(node, 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory the unprivileged child can reach (t.TempDir's parents are 0700), holding a copy
	// of this test binary and the link the webhook would give the guard.
	dir, err := os.MkdirTemp("", "pvrescue-guard-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "data")
	if err := os.Symlink(node, link); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "sidecar.test")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestNodeGuardSizesAsNonRoot$")
	cmd.Env = append(os.Environ(), "PVRESCUE_SIZE_OF="+link)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child as 65532: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "uid=65532 size=512 err=<nil>") {
		t.Fatalf("non-root guard did not size the fake: %s", out)
	}
	// And the node itself is not openable by that user: the old BLKGETSIZE64 way could not work.
	probe := exec.Command("/bin/sh", "-c", "exec 3<"+node)
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	if probe.Run() == nil {
		t.Fatalf("uid 65532 could open %s: the test does not prove what it means to", node)
	}
	t.Logf("as uid 65532: %s", strings.TrimSpace(strings.Split(string(out), "\n")[0]))
}
