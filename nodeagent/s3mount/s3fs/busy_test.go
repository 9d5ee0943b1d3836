package s3fs

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Which statfs answers let a bridge be stopped and unmounted.
func TestBridgeGone(t *testing.T) {
	for _, tc := range []struct {
		err     error
		running bool
		want    bool
	}{
		{nil, true, false},
		{nil, false, false},
		{fmt.Errorf("statfs: %w", stack.ErrTimeout), true, false},
		{fmt.Errorf("statfs: %w", stack.ErrTimeout), false, false},
		{syscall.ENOTCONN, true, true},
		{syscall.ECONNABORTED, true, true},
		{syscall.EACCES, true, false},
		{syscall.EACCES, false, true},
		{errors.New("other"), false, true},
	} {
		if got := bridgeGone(tc.err, tc.running); got != tc.want {
			t.Errorf("bridgeGone(%v, running %v) = %v, want %v", tc.err, tc.running, got, tc.want)
		}
	}
}
