//go:build node

package s3mount_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// Hung is not dead for bridges either (issue 32 item 4): the bridge's real s3fs is stopped
// (SIGSTOP: statfs of its mount times out, as under saturating writes) and the agent restarts.
// The new agent's adoption finds the bridge hung and keeps it: the same pid, not killed, its
// mount and record in place; once s3fs runs again (SIGCONT) the target answers through it.
func TestNodeHungBridgeIsNotDead(t *testing.T) {
	e := newNodeEnv(t)
	e.volume("pv-h", nil, false)
	pod := e.pod("app-h", "pv-h")
	target, driverProc := e.publish(pod, "pv-h")
	_, stop := e.agent(30 * time.Second)
	must(t, driverProc.Signal(syscall.SIGKILL))
	waitFor(t, 30*time.Second, "target bridged", func() bool {
		var st unix.Statfs_t
		return unix.Statfs(target, &st) == nil && len(s3fsPidsUnder(e.bridgeDir("pv-h"))) == 1
	})
	bridge := e.bridgeDir("pv-h")
	proc := bridgeProcess(t, bridge)
	stop()

	testenv.StopProcess(t, proc.Pid) // every thread: the agent's statfs stays queued, unread
	r2, _ := e.agent(30 * time.Second)
	time.Sleep(4 * time.Second) // adoption (statfs timeout 1 s) and twenty check intervals
	if s := procState(proc.Pid); s != "T" {
		t.Fatalf("the hung bridge's s3fs %d is in state %q after the agent restart, want T (stopped, alive, not signalled)", proc.Pid, s)
	}
	if n := len(stackAt(bridge)); n != 1 {
		t.Errorf("bridge mounts after the restart: %d, want 1 (a timeout never unmounts a bridge)", n)
	}
	if _, err := os.Stat(filepath.Join(e.state, "s3", "bridges", "pv-h.json")); err != nil {
		t.Errorf("bridge record: %v (dropped on a timeout)", err)
	}
	if pids := s3fsPidsUnder(e.dir); len(pids) != 1 || pids[0] != proc.Pid {
		t.Errorf("s3fs processes %v, want only the hung bridge %d (no second writer)", pids, proc.Pid)
	}
	if got := counterValue(t, r2.Metrics().BridgesActive); got != 1 {
		t.Errorf("bridges_active %v after adopting the hung bridge, want 1", got)
	}

	must(t, proc.Signal(syscall.SIGCONT))
	waitFor(t, 10*time.Second, "target answers through the same bridge once s3fs runs again", func() bool {
		var st unix.Statfs_t
		return unix.Statfs(target, &st) == nil
	})
	if pids := s3fsPidsUnder(e.dir); len(pids) != 1 || pids[0] != proc.Pid {
		t.Errorf("s3fs processes %v after SIGCONT, want the same bridge %d", pids, proc.Pid)
	}
}

// procState is the state letter of pid (/proc/<pid>/stat), "" when it is gone.
func procState(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if errors.Is(err, os.ErrNotExist) || err != nil {
		return ""
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) == 0 {
		return ""
	}
	return f[0]
}
