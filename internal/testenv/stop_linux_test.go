//go:build linux

package testenv

import (
	"os/exec"
	"testing"
	"time"
)

func TestProcStatState(t *testing.T) {
	for _, tc := range []struct{ stat, want string }{
		{"1234 (s3fs) S 1 1234 1234 0 -1", "S"},
		{"1234 (s3fs) T 1 1234", "T"},
		{"77 (a) b) (c) t 1 2", "t"}, // a command name with parentheses and spaces
		{"9 (x y) D 1", "D"},
		{"9 (trunc)", ""},
		{"", ""},
	} {
		if got := ProcStatState(tc.stat); got != tc.want {
			t.Errorf("ProcStatState(%q) = %q, want %q", tc.stat, got, tc.want)
		}
	}
}

// StopProcess returns with the process stopped and resume lets it run on (no root needed).
func TestStopProcessAndResume(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	resume := StopProcess(t, cmd.Process.Pid)
	if err := allThreadsStopped(cmd.Process.Pid); err != nil {
		t.Fatalf("after StopProcess: %v", err)
	}
	resume()
	resume() // once only
	WaitFor(t, 5*time.Second, "sleep running again", func() error {
		if allThreadsStopped(cmd.Process.Pid) == nil {
			return ErrNotYet
		}
		return nil
	})
}
