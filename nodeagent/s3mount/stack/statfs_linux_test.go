//go:build linux

package stack

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A check of a path while another check of it is still running (within its timeout) runs and
// answers; only a call past its timeout makes later checks fail at once, until it returns.
func TestRealStatfsConcurrentChecksAreNotStuck(t *testing.T) {
	ctx := context.Background()
	release, entered := make(chan struct{}), make(chan struct{}, 4)
	var calls atomic.Int32
	s := newRealStatfs()
	s.statfs = func(string) error {
		if calls.Add(1) == 1 {
			entered <- struct{}{}
			<-release // the first call answers only when released
		}
		return nil
	}
	first := make(chan error, 1)
	go func() { first <- s.Statfs(ctx, "/t", time.Minute) }()
	<-entered
	if err := s.Statfs(ctx, "/t", time.Minute); err != nil {
		t.Fatalf("second check while the first runs: %v, want nil (it is not stuck)", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("first check: %v", err)
	}
}

func TestRealStatfsStuckAfterTimeout(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	var calls atomic.Int32
	s := newRealStatfs()
	s.statfs = func(string) error {
		if calls.Add(1) == 1 {
			<-release
		}
		return nil
	}
	if err := s.Statfs(ctx, "/t", 10*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("hung call: %v, want ErrTimeout", err)
	}
	if err := s.Statfs(ctx, "/t", time.Minute); !errors.Is(err, ErrTimeout) || calls.Load() != 1 {
		t.Fatalf("check behind a stuck call: %v after %d calls, want ErrTimeout at once (1 call)", err, calls.Load())
	}
	if err := s.Statfs(ctx, "/other", time.Minute); err != nil {
		t.Fatalf("another path: %v", err)
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := s.Statfs(ctx, "/t", time.Minute)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the stuck call returned: %v, want nil", err)
		}
		time.Sleep(time.Millisecond)
	}
}
