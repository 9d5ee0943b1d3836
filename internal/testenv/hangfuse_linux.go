//go:build linux

package testenv

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// FUSE protocol numbers (linux/fuse.h) the hanging daemon needs.
const (
	fuseInit        = 26
	fuseStatfs      = 17
	fuseInHeaderLen = 40
	fuseInitOutLen  = 64
	fuseOutHeader   = 16
	fuseReadBuffer  = 64 << 10 // ≥ FUSE_MIN_READ_BUFFER and a header plus max_write
)

// HangingFUSE is a FUSE daemon that takes every statfs request off the connection and never
// answers it — a daemon stuck inside its handler (as rclone's statfs asking a backend that
// does not reply), not a stopped one: whoever called statfs waits uninterruptibly, SIGKILL
// included, until the connection is aborted. Other requests are answered ENOSYS.
type HangingFUSE struct {
	MountPoint string

	fd       int
	held     chan struct{}
	heldOnce sync.Once
	stopOnce sync.Once
	done     chan struct{}
}

// Held is closed once the first statfs request has been read and is being held.
func (h *HangingFUSE) Held() <-chan struct{} { return h.held }

// Abort aborts the connection and detaches the mount (umount -f -l: FUSE aborts on a forced
// unmount; closing the device would wait for the daemon's own read to return): every request in
// flight ends (its caller gets ECONNABORTED and can exit) and the daemon stops. It is also the
// test's cleanup.
func (h *HangingFUSE) Abort() error {
	var err error
	h.stopOnce.Do(func() {
		if e := unix.Unmount(h.MountPoint, unix.MNT_FORCE|unix.MNT_DETACH); e != nil {
			err = fmt.Errorf("umount -f -l %s: %w", h.MountPoint, e)
			return // the daemon may still be reading: its descriptor stays open
		}
		<-h.done
		_ = unix.Close(h.fd)
	})
	return err
}

// StartHangingFUSE mounts a HangingFUSE on a new directory (root needed).
func StartHangingFUSE(t testing.TB) *HangingFUSE {
	t.Helper()
	RequireRoot(t)
	mnt := filepath.Join(t.TempDir(), "hanging")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open /dev/fuse (load the fuse module: modprobe fuse): %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := unix.Mount("pvrescue-hanging", mnt, "fuse.pvrescue-hanging", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		_ = unix.Close(fd)
		t.Fatalf("mount a FUSE connection at %s: %v", mnt, err)
	}
	h := &HangingFUSE{MountPoint: mnt, fd: fd, held: make(chan struct{}), done: make(chan struct{})}
	go h.serve()
	t.Cleanup(func() {
		if err := h.Abort(); err != nil {
			t.Error(err)
		}
	})
	return h
}

// serve answers INIT, holds every statfs and refuses the rest, until the device is closed.
func (h *HangingFUSE) serve() {
	defer close(h.done)
	buf := make([]byte, fuseReadBuffer)
	for {
		n, err := unix.Read(h.fd, buf)
		if errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.EAGAIN) {
			continue
		}
		if err != nil || n < fuseInHeaderLen {
			return // closed (Abort) or unmounted
		}
		opcode := binary.LittleEndian.Uint32(buf[4:8])
		unique := binary.LittleEndian.Uint64(buf[8:16])
		switch opcode {
		case fuseInit:
			major := binary.LittleEndian.Uint32(buf[fuseInHeaderLen:])
			minor := binary.LittleEndian.Uint32(buf[fuseInHeaderLen+4:])
			out := make([]byte, fuseInitOutLen)
			binary.LittleEndian.PutUint32(out[0:], major)
			binary.LittleEndian.PutUint32(out[4:], min(minor, 31))
			binary.LittleEndian.PutUint32(out[20:], 4096) // max_write
			h.reply(unique, 0, out)
		case fuseStatfs:
			h.heldOnce.Do(func() { close(h.held) })
		default:
			h.reply(unique, -int32(syscall.ENOSYS), nil)
		}
	}
}

func (h *HangingFUSE) reply(unique uint64, errno int32, body []byte) {
	out := make([]byte, fuseOutHeader+len(body))
	binary.LittleEndian.PutUint32(out[0:], uint32(len(out)))
	binary.LittleEndian.PutUint32(out[4:], uint32(errno))
	binary.LittleEndian.PutUint64(out[8:], unique)
	copy(out[fuseOutHeader:], body)
	_, _ = unix.Write(h.fd, out)
}
