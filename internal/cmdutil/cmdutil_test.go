package cmdutil

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestRunEndsContextOnSIGTERM: SIGTERM cancels the program's context instead of killing the
// process, and Run returns the program's own exit code after it returned.
func TestRunEndsContextOnSIGTERM(t *testing.T) {
	cleaned := false
	code := Run(func(ctx context.Context) int {
		defer func() { cleaned = true }()
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Error("context not cancelled by SIGTERM")
		}
		return 3
	})
	if code != 3 || !cleaned {
		t.Fatalf("Run = %d, deferred cleanup ran: %v; want 3 and true", code, cleaned)
	}
}
