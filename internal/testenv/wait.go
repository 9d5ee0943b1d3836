package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// PollInterval is how often WaitFor checks its condition.
const PollInterval = 20 * time.Millisecond

// Poll checks cond every interval (the first time at once) until it reports true or ctx ends. An
// error from cond does not stop the wait: it is the reason the condition is not met yet, and the
// last one is part of the error Poll returns when ctx ends first. An error made with Abort (a
// process that should answer has exited) ends the wait at once and is returned as it is.
func Poll(ctx context.Context, interval time.Duration, cond func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		var a *abort
		if errors.As(err, &a) {
			return false, a.err
		}
		if err != nil {
			last = err
		}
		return ok, nil
	})
	if err != nil && !wait.Interrupted(err) {
		return err
	}
	if err != nil && last != nil {
		return fmt.Errorf("%w (last: %w)", err, last)
	}
	return err
}

// ErrNotYet is what Until's condition returns while its predicate is false.
var ErrNotYet = errors.New("condition not met yet")

type abort struct{ err error }

func (a *abort) Error() string { return a.err.Error() }
func (a *abort) Unwrap() error { return a.err }

// Abort marks an error of a Poll condition as final: Poll stops and returns err.
func Abort(err error) error { return &abort{err: err} }

// WaitFor calls cond every PollInterval until it returns nil and fails the test when timeout
// passes first (or the test's context ends), naming what it waited for and cond's last error.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	err := Poll(ctx, PollInterval, func(context.Context) (bool, error) {
		err := cond()
		return err == nil, err
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
	}
}

// Until adapts a predicate to WaitFor.
func Until(pred func() bool) func() error {
	return func() error {
		if pred() {
			return nil
		}
		return ErrNotYet
	}
}

// WaitUntil checks pred every interval (the first time at once) until it holds; it returns an
// error when timeout passes or ctx ends first. For tools (hack/bench) that time what they wait for.
func WaitUntil(ctx context.Context, timeout, interval time.Duration, pred func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return Poll(ctx, interval, func(context.Context) (bool, error) { return pred(), nil })
}
