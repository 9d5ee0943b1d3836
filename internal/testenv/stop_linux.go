//go:build linux

package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StopProcess stops pid with SIGSTOP and returns once every one of its threads is stopped, so
// that a FUSE daemon it runs reads no request from then on: a request the kernel queues later
// stays pending, and its caller can still be killed. kill(2) returns before the threads have
// stopped; a daemon thread woken for the signal first takes a request already queued (one made
// in that instant), and the caller of that request then waits uninterruptibly — unkillable —
// until the daemon runs again. The returned resume sends SIGCONT once, from any goroutine (it
// is also a cleanup).
func StopProcess(t testing.TB, pid int) (resume func()) {
	t.Helper()
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	t.Cleanup(resume)
	WaitFor(t, 10*time.Second, fmt.Sprintf("every thread of process %d stopped", pid), func() error {
		return allThreadsStopped(pid)
	})
	return resume
}

// allThreadsStopped is nil when every thread of pid is in state T (stopped) or t (traced).
func allThreadsStopped(pid int) error {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return Abort(fmt.Errorf("process %d has no threads to look at (exited?)", pid))
	}
	var running []string
	for _, stat := range tasks {
		b, err := os.ReadFile(stat)
		if errors.Is(err, os.ErrNotExist) {
			continue // a thread that exited meanwhile
		}
		if err != nil {
			return err
		}
		if st := ProcStatState(string(b)); st != "T" && st != "t" {
			running = append(running, filepath.Base(filepath.Dir(stat))+":"+st)
		}
	}
	if len(running) > 0 {
		return fmt.Errorf("threads not stopped yet (tid:state): %s", strings.Join(running, " "))
	}
	return nil
}

// ProcStatState is the state field of a /proc/<pid>/stat line ("R", "S", "D", "T", ...); the
// command name before it is in parentheses and may hold spaces and parentheses itself.
func ProcStatState(stat string) string {
	f := strings.Fields(stat[strings.LastIndexByte(stat, ')')+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
