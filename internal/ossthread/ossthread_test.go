//go:build linux

package ossthread

import (
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// The test binary's main goroutine stays on the main thread, so TestMain can call Run from the
// main thread itself: the case in which the work must be moved to another thread.
func init() { runtime.LockOSThread() }

var fromMain struct{ caller, worker int }

func TestMain(m *testing.M) {
	fromMain.caller = unix.Gettid()
	Run(func() { fromMain.worker = unix.Gettid() })
	os.Exit(m.Run())
}

func TestRunNeverOnTheMainThread(t *testing.T) {
	if fromMain.caller != os.Getpid() {
		t.Fatalf("TestMain ran on thread %d, not the main thread %d: the main-thread case was not exercised", fromMain.caller, os.Getpid())
	}
	if fromMain.worker == 0 || fromMain.worker == os.Getpid() {
		t.Errorf("Run called from the main thread ran f on thread %d (main is %d)", fromMain.worker, os.Getpid())
	}
	for i := 0; i < 100; i++ {
		var tid int
		Run(func() { tid = unix.Gettid() })
		if tid == 0 || tid == os.Getpid() {
			t.Fatalf("call %d: f ran on thread %d (main is %d)", i, tid, os.Getpid())
		}
	}
}

func TestEnterReportsOpenErrors(t *testing.T) {
	called := false
	err := Enter("/nonexistent/ns/net", unix.CLONE_NEWNET, func() error { called = true; return nil })
	if err == nil || called {
		t.Errorf("Enter of a missing namespace: err %v, f called %v", err, called)
	}
}
