//go:build linux

package fusewatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// NewOS returns the real OS.
func NewOS(opts OSOptions) OS {
	opts.defaults()
	return realOS{opts: opts}
}

type realOS struct{ opts OSOptions }

func (r realOS) Connections() (map[Connection][]Mount, error) {
	b, err := os.ReadFile(r.opts.Mountinfo)
	if err != nil {
		return nil, fmt.Errorf("fusewatch: %w", err)
	}
	return Connections(string(b)), nil
}

// Holders walks <proc>/<pid>/fd: a readlink per descriptor (at most MaxFDsPerProcess of each
// process, listed fdBatch names at a time), and an fdinfo read only for those whose link is
// exactly /dev/fuse (FuseDeviceLink). No file a descriptor points to is ever stat'ed or opened:
// readlink of the magic link and fdinfo are answered from the kernel's own structures, so a
// tenant's file on a hung NFS or FUSE volume cannot stall the walk. Processes that exit
// meanwhile are skipped.
func (r realOS) Holders() ([]Holder, error) {
	ents, err := os.ReadDir(r.opts.Proc)
	if err != nil {
		return nil, fmt.Errorf("fusewatch: %w", err)
	}
	var out []Holder
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if h, ok := r.holder(pid, e.Name()); ok {
			out = append(out, h)
		}
	}
	return out, nil
}

// fdBatch is how many descriptor names are read from /proc/<pid>/fd at once.
const fdBatch = 1024

// holder looks at pid's descriptors; ok when one of them is /dev/fuse.
func (r realOS) holder(pid int, name string) (Holder, bool) {
	fdDir := filepath.Join(r.opts.Proc, name, "fd")
	d, err := os.Open(fdDir)
	if err != nil {
		return Holder{}, false
	}
	defer func() { _ = d.Close() }() // a directory read only
	h := Holder{PID: pid}
	found := false
	// Each link is read relative to the open directory: a readlink of the whole path resolved
	// /proc/<pid>/fd again for every descriptor (half a walk's time).
	dirFD := int(d.Fd())
	var link [len(FuseDevice) + 1]byte // a longer target is not /dev/fuse: its tail is not needed
	for seen := 0; seen < r.opts.MaxFDsPerProcess; {
		fds, err := d.Readdirnames(min(fdBatch, r.opts.MaxFDsPerProcess-seen))
		seen += len(fds)
		for _, fd := range fds {
			n, err := unix.Readlinkat(dirFD, fd, link[:])
			if err != nil || !FuseDeviceLink(string(link[:n])) {
				continue
			}
			found = true
			info, err := os.ReadFile(filepath.Join(r.opts.Proc, name, "fdinfo", fd))
			if err != nil {
				h.Unnamed = true
				continue
			}
			if c, ok := FDInfoConnection(string(info)); ok {
				h.Connections = append(h.Connections, c)
			} else {
				h.Unnamed = true
			}
		}
		if err != nil || len(fds) == 0 {
			break // io.EOF at the end, or the process went
		}
	}
	if !found {
		return Holder{}, false
	}
	return h, true
}

func (r realOS) Events() (Events, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fusewatch: epoll_create1: %w", err)
	}
	ev := &epollEvents{ep: ep, mi: -1, stop: -1, pids: map[int]int{}, fds: map[int]int{}}
	fail := func(err error) (Events, error) {
		_ = ev.Close()
		return nil, err
	}
	mi, err := unix.Open(r.opts.Mountinfo, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(fmt.Errorf("fusewatch: open %s: %w", r.opts.Mountinfo, err))
	}
	ev.mi = mi
	// The mount table signals a change as POLLERR|POLLPRI; each poll consumes it.
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, mi, &unix.EpollEvent{Events: unix.EPOLLPRI, Fd: fd32(mi)}); err != nil {
		return fail(fmt.Errorf("fusewatch: watch %s: %w", r.opts.Mountinfo, err))
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fail(fmt.Errorf("fusewatch: eventfd: %w", err))
	}
	ev.stop = stop
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, stop, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: fd32(stop)}); err != nil {
		return fail(fmt.Errorf("fusewatch: eventfd: %w", err))
	}
	return ev, nil
}

// epollEvents holds the mount table, an eventfd to interrupt Wait, and one pidfd per process.
type epollEvents struct {
	ep, mi, stop int

	mu   sync.Mutex
	pids map[int]int // pid → pidfd
	fds  map[int]int // pidfd → pid
}

func (e *epollEvents) Add(pid int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.pids[pid]; ok {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("pid %d: %w", pid, ErrExited)
	}
	if err != nil {
		return fmt.Errorf("fusewatch: pidfd_open %d: %w", pid, err)
	}
	if err := unix.EpollCtl(e.ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: fd32(fd)}); err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("fusewatch: watch pid %d: %w", pid, err)
	}
	e.pids[pid], e.fds[fd] = fd, pid
	return nil
}

func (e *epollEvents) Remove(pid int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	fd, ok := e.pids[pid]
	if !ok {
		return true // Wait reported its exit and dropped it
	}
	pfd := []unix.PollFd{{Fd: fd32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd, 0); err == nil && n > 0 {
		return true // exited: Wait reports it
	}
	e.removeLocked(pid)
	return false
}

func (e *epollEvents) removeLocked(pid int) {
	fd, ok := e.pids[pid]
	if !ok {
		return
	}
	_ = unix.EpollCtl(e.ep, unix.EPOLL_CTL_DEL, fd, nil)
	_ = unix.Close(fd)
	delete(e.pids, pid)
	delete(e.fds, fd)
}

func (e *epollEvents) Wait(ctx context.Context) (Event, error) {
	stop := context.AfterFunc(ctx, func() {
		var one [8]byte
		one[0] = 1
		_, _ = unix.Write(e.stop, one[:])
	})
	defer stop()
	buf := make([]unix.EpollEvent, 64)
	for {
		n, err := unix.EpollWait(e.ep, buf, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return Event{}, fmt.Errorf("fusewatch: epoll_wait: %w", err)
		}
		var out Event
		interrupted := false
		e.mu.Lock()
		for _, ev := range buf[:n] {
			switch fd := int(ev.Fd); fd {
			case e.mi:
				out.MountsChanged = true
			case e.stop:
				var b [8]byte
				_, _ = unix.Read(e.stop, b[:])
				interrupted = true
			default:
				if pid, ok := e.fds[fd]; ok {
					out.Exited = append(out.Exited, pid)
					e.removeLocked(pid)
				}
			}
		}
		e.mu.Unlock()
		if out.MountsChanged || len(out.Exited) > 0 {
			return out, nil
		}
		if interrupted && ctx.Err() != nil {
			return Event{}, ctx.Err()
		}
	}
}

func (e *epollEvents) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for pid := range e.pids {
		e.removeLocked(pid)
	}
	for _, fd := range []int{e.mi, e.stop, e.ep} {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	return nil
}

// fd32 is a file descriptor as epoll and poll take it.
func fd32(fd int) int32 {
	return int32(fd) //nolint:gosec // G115: descriptors are below RLIMIT_NOFILE, far under 2^31
}
