package testenv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollInterval is how often WaitFor checks its condition.
const PollInterval = 20 * time.Millisecond

// Poll checks cond every interval (the first time at once) until it reports true or ctx ends. An
// error from cond does not stop the wait: it is the reason the condition is not met yet, and the
// last one is part of the error Poll returns when ctx ends first.
func Poll(ctx context.Context, interval time.Duration, cond func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			last = err
		}
		return ok, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %v)", err, last)
	}
	return err
}

// WaitFor polls cond until it reports true and fails the test when timeout passes first (or the
// test's context ends), naming what it waited for and cond's last error.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	if err := Poll(ctx, PollInterval, func(context.Context) (bool, error) { return cond() }); err != nil {
		t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
	}
}

// Until adapts a plain predicate to WaitFor and Poll.
func Until(cond func() bool) func() (bool, error) {
	return func() (bool, error) { return cond(), nil }
}
