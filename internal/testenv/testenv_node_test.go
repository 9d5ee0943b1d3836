//go:build node

package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLoopDeviceFromFreshDevices attaches a loop device where neither the kernel device nor its
// node exists — the state of a fresh machine, which has only loop0-7 — and proves Detach removes
// both again.
func TestLoopDeviceFromFreshDevices(t *testing.T) {
	RequireRoot(t)
	r := LoopRange{First: 290, Last: 299}
	if _, err := RemoveLoopNodes(r, nil); err != nil {
		t.Fatalf("clear %s: %v", r, err)
	}
	img := filepath.Join(t.TempDir(), "img")
	if err := os.WriteFile(img, make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := AttachLoop(img, r)
	if err != nil {
		t.Fatalf("AttachLoop: %v", err)
	}
	if !r.Contains(l.Minor) {
		t.Errorf("attached loop%d, outside %s", l.Minor, r)
	}
	if !l.addedLoop || !l.madeNode {
		t.Errorf("loop%d: addedLoop %v, madeNode %v; want both (the range was cleared first)", l.Minor, l.addedLoop, l.madeNode)
	}
	if got := loopBacking(l.Minor); got != img {
		t.Errorf("backing file %q, want %q", got, img)
	}
	var st unix.Stat_t
	if err := unix.Stat(l.Dev, &st); err != nil || unix.Major(st.Rdev) != LoopMajor || int(unix.Minor(st.Rdev)) != l.Minor {
		t.Errorf("node %s: %v %d:%d", l.Dev, err, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	// A second image takes the next device: the first is busy.
	l2 := AttachLoopT(t, img, r)
	if l2.Minor == l.Minor {
		t.Errorf("second attach reused busy loop%d", l.Minor)
	}
	if err := l.Detach(); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if _, err := os.Lstat(l.Dev); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after Detach: %v", l.Dev, err)
	}
	if _, err := os.Stat(filepath.Join("/sys/block", filepath.Base(l.Dev))); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("kernel device loop%d left after Detach: %v", l.Minor, err)
	}
}

// TestLoopDeviceSizeAndCleanup checks the helper the node tests use: the device has the image's
// size and its node is gone after the test.
func TestLoopDeviceSizeAndCleanup(t *testing.T) {
	var dev string
	t.Run("attach", func(t *testing.T) {
		l := LoopDevice(t, t.TempDir(), 512)
		dev = l.Dev
		f, err := os.Open(l.Dev)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = f.Close() }() // used for the ioctl only
		size, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil || size != 512 {
			t.Errorf("BLKGETSIZE64 = %d, %v; want 512", size, err)
		}
	})
	if loopBacking(mustMinor(t, dev)) != "" {
		t.Errorf("%s still attached after its test ended", dev)
	}
}

func mustMinor(t *testing.T, dev string) int {
	n, ok := loopMinor(dev)
	if !ok {
		t.Fatalf("not a loop device: %q", dev)
	}
	return n
}

// TestLoopNodesT removes nodes made during the test (as the agent makes them) and keeps the rest.
func TestLoopNodesT(t *testing.T) {
	RequireRoot(t)
	r := LoopRange{First: 280, Last: 289}
	if _, err := RemoveLoopNodes(r, nil); err != nil {
		t.Fatal(err)
	}
	kept := LoopDevPath(280)
	if err := unix.Mknod(kept, unix.S_IFBLK|0o660, int(unix.Mkdev(LoopMajor, 280))); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(kept) })
	made := LoopDevPath(281)
	t.Run("agent makes a node", func(t *testing.T) {
		LoopNodesT(t, r)
		if err := unix.Mknod(made, unix.S_IFBLK|0o660, int(unix.Mkdev(LoopMajor, 281))); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Lstat(made); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s made during the test was left: %v", made, err)
	}
	if _, err := os.Lstat(kept); err != nil {
		t.Errorf("%s existed before the test and was removed: %v", kept, err)
	}
}

// TestS3AndS3fs starts versitygw and mounts a bucket with s3fs; a write through the mount lands
// in the bucket's directory; a killed s3fs leaves a dead mount that Sweep removes.
func TestS3AndS3fs(t *testing.T) {
	RequireRoot(t)
	s := S3(t, "bkt")
	m := S3fs(t, s, "bkt")
	if err := os.WriteFile(filepath.Join(m.MountPoint, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("write through s3fs: %v\n%s", err, m.Log())
	}
	WaitFor(t, 10*time.Second, "the object in the bucket directory", func() error {
		b, err := os.ReadFile(filepath.Join(s.Dir, "bkt", "hello"))
		if err == nil && string(b) != "hi" {
			err = fmt.Errorf("content %q", b)
		}
		return err
	})
	if pids := S3fsPIDs(m.MountPoint); len(pids) != 1 || pids[0] != m.Cmd.Process.Pid {
		t.Errorf("S3fsPIDs(%s) = %v, want [%d]", m.MountPoint, pids, m.Cmd.Process.Pid)
	}
	m.Kill()
	var st unix.Statfs_t
	if err := unix.Statfs(m.MountPoint, &st); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("statfs of a killed s3fs: %v, want ENOTCONN", err)
	}
	if err := SweepMounts(filepath.Dir(m.MountPoint)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := MountedAt(m.MountPoint); ok {
		t.Errorf("%s still mounted after SweepMounts", m.MountPoint)
	}
	if !strings.HasPrefix(s.Endpoint(), "http://127.0.0.1:") {
		t.Errorf("endpoint %q", s.Endpoint())
	}
}

// TestStopProcessStopsEveryThread stops a real s3fs (many threads): once StopProcess returns,
// every thread is stopped, and a process whose statfs then waits on the mount can be killed
// (its request was never read); after resume the mount answers again.
func TestStopProcessStopsEveryThread(t *testing.T) {
	RequireRoot(t)
	m := S3fs(t, S3(t, "stop"), "stop")
	pid := m.Cmd.Process.Pid
	resume := StopProcess(t, pid)
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if len(tasks) < 2 {
		t.Fatalf("s3fs %d has %d threads; this test needs a multi-threaded daemon", pid, len(tasks))
	}
	for _, stat := range tasks {
		b, err := os.ReadFile(stat)
		if err != nil {
			t.Fatal(err)
		}
		if st := ProcStatState(string(b)); st != "T" {
			t.Errorf("%s: state %q after StopProcess, want T", stat, st)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	stat := exec.CommandContext(ctx, "stat", "-f", m.MountPoint)
	exited := make(chan error, 1)
	if err := stat.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { exited <- stat.Wait() }()
	select {
	case err := <-exited:
		if ctx.Err() == nil {
			t.Fatalf("stat -f of a stopped daemon's mount returned before its deadline: %v", err)
		}
	case <-time.After(10 * time.Second):
		resume()
		t.Fatalf("stat -f waiting on a stopped daemon was killed at 1 s and had not exited 9 s later: its request had been read")
	}

	resume()
	WaitFor(t, 10*time.Second, "the mount answers after SIGCONT", func() error {
		var st unix.Statfs_t
		return unix.Statfs(m.MountPoint, &st)
	})
}
