//go:build node

package containermount_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNodeWhyOpenTree keeps the package doc honest about what does not work: once inside the
// container's mount namespace, a host path names the container's file (or nothing), a
// descriptor opened on it before setns cannot be bind-mounted with mount(2) (EINVAL: not in
// this namespace); only a detached clone made before setns can be attached.
func TestNodeWhyOpenTree(t *testing.T) {
	e := newS3Env(t)
	src := filepath.Join(e.dir, "host-only")
	must(t, os.MkdirAll(src, 0o755))
	must(t, unix.Mount("tmpfs", src, "tmpfs", 0, "size=1m"))
	dst := filepath.Join(e.dir, "ctr-c", "dst")
	must(t, os.MkdirAll(dst, 0o755))
	// The container is made before src has anything worth seeing and gets a private rootfs-like
	// view: its copy of src is unmounted, as a runtime's rootfs would not have it.
	c := e.startContainer("c", "private", "umount "+src)

	type outcome struct{ pathBind, fdBind, clone error }
	done := make(chan outcome, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var o outcome
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			o.pathBind = err
			done <- o
			return
		}
		fd, err := unix.Open(src, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			o.pathBind = err
			done <- o
			return
		}
		tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			o.clone = err
			done <- o
			return
		}
		own, _ := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		ns, _ := unix.Open(fmt.Sprintf("/proc/%d/ns/mnt", c.pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
			o.pathBind = err
			done <- o
			return
		}
		o.pathBind = unix.Mount(src, dst, "", unix.MS_BIND, "")
		o.fdBind = unix.Mount(fmt.Sprintf("/proc/self/fd/%d", fd), dst, "", unix.MS_BIND, "")
		o.clone = unix.MoveMount(tree, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
		_ = unix.Setns(own, unix.CLONE_NEWNS)
		done <- o
	}()
	o := <-done
	t.Logf("bind of the host path: %v; bind of /proc/self/fd/N: %v; move_mount of an open_tree clone: %v", o.pathBind, o.fdBind, o.clone)
	// The host path resolves in the container's namespace: to nothing (ENOENT) in a real
	// container, here (no pivot_root) to the container's own empty directory — the wrong data.
	stack := c.table(t).Stack(dst)
	if o.pathBind == nil {
		if len(stack) == 0 || stack[0].FSType == "tmpfs" {
			t.Errorf("bind of the host path inside the container reached the host's tmpfs: %+v", stack)
		}
	} else if !errors.Is(o.pathBind, syscall.ENOENT) {
		t.Errorf("bind of a host-only path inside the container: %v, want ENOENT or the container's own directory", o.pathBind)
	}
	if o.fdBind == nil {
		t.Error("bind of /proc/self/fd/N of a host descriptor inside the container succeeded")
	}
	if o.clone != nil {
		t.Errorf("move_mount of the clone: %v", o.clone)
	}
	if got, _ := c.table(t).Top(dst); got.FSType != "tmpfs" {
		t.Errorf("container's %s shows %+v, want the host's tmpfs", dst, got)
	}
}
