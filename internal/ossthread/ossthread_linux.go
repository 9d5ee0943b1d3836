//go:build linux

package ossthread

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

func run(f func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			defer close(done)
			f() // no UnlockOSThread: the thread ends with this goroutine
			return
		}
		// This goroutine holds the main thread: keeping it locked here keeps the worker below off
		// it; the main thread is released untouched once the worker is done.
		inner := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			defer close(inner)
			f()
		}()
		<-inner
		runtime.UnlockOSThread()
		close(done)
	}()
	<-done
}

func enter(nsPath string, nstype int, f func() error) error {
	var err error
	run(func() {
		fd, oerr := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			err = fmt.Errorf("open %s: %w", nsPath, oerr)
			return
		}
		defer func() { _ = unix.Close(fd) }() // a namespace fd: nothing to lose on close
		if serr := unix.Setns(fd, nstype); serr != nil {
			err = fmt.Errorf("setns %s: %w", nsPath, serr)
			return
		}
		err = f()
	})
	return err
}
