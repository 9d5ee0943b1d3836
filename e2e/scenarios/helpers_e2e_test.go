//go:build e2e

package scenarios

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

func ptr[T any](v T) *T { return &v }

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

// waitFor polls cond every 250ms and fails the test after timeout with cond's last reason.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	err := testenv.Poll(ctx, 250*time.Millisecond, func(context.Context) (bool, error) {
		if ok, why := cond(); !ok {
			return false, errors.New(why)
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
	}
}

// execIn runs a command in a container (bounded to 10s) and returns stdout.
func execIn(e *env, ns, pod, container string, cmd ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, stderr, err := framework.Exec(ctx, e.c.Config, e.c.Client, ns, pod, container, cmd...)
	if err != nil {
		return out, fmt.Errorf("%w (stderr %q)", err, stderr)
	}
	return out, nil
}

func restartCounts(p *corev1.Pod) map[string]int32 {
	m := map[string]int32{}
	for _, s := range p.Status.ContainerStatuses {
		m[s.Name] = s.RestartCount
	}
	return m
}
