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

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// sysfsLoopMinor is this test's own loop number (outside the agent's and other tests' ranges).
const sysfsLoopMinor = 391

// attachTestLoop makes loop minor exist (LOOP_CTL_ADD + mknod: a fresh machine has only
// loop0-7 and no udev), binds image to it, and undoes all of it when the test ends.
func attachTestLoop(t *testing.T, image string, minor int) string {
	return attachTestLoopMode(t, image, minor, os.O_RDWR)
}

// attachTestLoopMode: with os.O_RDONLY the loop is read-only, as the agent attaches its fakes.
func attachTestLoopMode(t *testing.T, image string, minor, mode int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root (loop devices): run under sudo, as CI does")
	}
	// Registered first, so it runs after the detach below: removes the node and the kernel
	// device LOOP_CTL_ADD made (devtmpfs recreates a removed node while the device exists).
	testenv.LoopNodesT(t, testenv.LoopRange{First: minor, Last: minor})
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("/dev/loop-control: %v (modprobe loop)", err)
	}
	_ = unix.IoctlSetInt(int(ctl.Fd()), unix.LOOP_CTL_ADD, minor) // EEXIST when the loop exists: the open below decides
	_ = ctl.Close()                                               // a control fd: nothing to lose on close
	node := fmt.Sprintf("/dev/loop%d", minor)
	made := false
	if _, err := os.Stat(node); os.IsNotExist(err) {
		if err := unix.Mknod(node, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(minor)))); err != nil {
			t.Fatal(err)
		}
		made = true
	}
	img, err := os.OpenFile(image, mode, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = img.Close() }() // the loop holds its own reference once set
	dev, err := os.OpenFile(node, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = dev.Close() }() // used for the ioctl only
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.LOOP_SET_FD, int(img.Fd())); err != nil {
		t.Fatalf("LOOP_SET_FD %s: %v", node, err)
	}
	t.Cleanup(func() {
		if d, err := os.OpenFile(node, os.O_RDWR, 0); err == nil {
			_ = unix.IoctlSetInt(int(d.Fd()), unix.LOOP_CLR_FD, 0)
			_ = d.Close() // used for the ioctl only
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

// unprivDir is a 0755 directory holding a copy of this test binary, reachable by uid 65532.
func unprivDir(t *testing.T) (dir, exe string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "pvrescue-exec-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
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
	exe = filepath.Join(dir, "sidecar.test")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, exe
}

// A pod whose containers all run as non-root: the guard (65532) tells the fake, writes the report
// and an empty filtered view; the exec wrapper cannot unlink the node in a root-owned directory
// (as in a container's /dev), says so and points at the filtered view, and runs the app anyway;
// the app cannot write to the fake (the node is root 0660 and the loop read-only).
func TestNodeGuardAndExecAsNonRoot(t *testing.T) {
	if link := os.Getenv("PVRESCUE_EXEC_LINK"); link != "" {
		out := os.Getenv("PVRESCUE_EXEC_OUT")
		g := NewGuardOptions()
		g.Devices, g.Out, g.TerminationLog = []DeviceSpec{{Path: link, Claim: "data"}}, out, ""
		env := NewEnv()
		fmt.Printf("guard=%d\n", RunGuard(g, env))
		x := NewExecOptions()
		x.DevicesFile = filepath.Join(out, "devices.json")
		x.Command = []string{"/bin/sh", "-c", "echo ran as $(id -u); ls -A " + out + "/dev; (echo x > " + link + ") 2>/dev/null && echo WROTE; true"}
		os.Exit(RunExec(x, env))
	}
	image := filepath.Join(t.TempDir(), "fake.img")
	if err := os.WriteFile(image, make([]byte, 512), 0o600); err != nil {
		t.Fatal(err)
	}
	node := attachTestLoopMode(t, image, sysfsLoopMinor+1, os.O_RDONLY)
	dir, exe := unprivDir(t)
	link := filepath.Join(dir, "data") // root-owned 0755 dir: 65532 cannot unlink in it
	if err := os.Symlink(node, link); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(out, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestNodeGuardAndExecAsNonRoot$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PVRESCUE_EXEC_LINK="+link, "PVRESCUE_EXEC_OUT="+out)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("child: %v\nstdout %s\nstderr %s", err, stdout.String(), stderr.String())
	}
	t.Logf("stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	for _, want := range []string{"512 bytes, fake", "guard=0", "ran as 65532"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("stdout lacks %q", want)
		}
	}
	if strings.Contains(stdout.String(), "WROTE") {
		t.Error("the non-root app wrote to the fake")
	}
	for _, want := range []string{"cannot remove fake device " + link, "permission denied", "lists the real devices only"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q", want)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(out, "dev")); err != nil || len(ents) != 0 {
		t.Errorf("filtered view: %v %v, want empty", ents, err)
	}
	r, err := ReadReport(filepath.Join(out, "devices.json"))
	if err != nil || len(r.Devices) != 1 || !r.Devices[0].Fake {
		t.Errorf("report %+v %v", r, err)
	}
	if _, err := os.Lstat(link); err != nil {
		t.Errorf("link gone: %v", err)
	}
}
