//go:build node

package s3mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/nodeagenttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// The one check before a bind over a kubelet path, with the real mount table, statfs and
// mounts: each refusal on what a driver may leave at our fresh path, and a live s3fs passing.
func TestNodeCheckMountRefusals(t *testing.T) {
	testenv.RequireRoot(t)
	srv := testenv.S3(t, "bkt")
	live := testenv.S3fs(t, srv, "bkt")
	dead := testenv.S3fs(t, srv, "bkt")
	dir := t.TempDir()
	testenv.Sweep(t, dir)

	cfg := config.Default()
	cfg.KubeletDir, cfg.StateDir = filepath.Join(dir, "kubelet"), filepath.Join(dir, "state")
	r, err := New(nodeagent.Deps{NodeName: "n1", Config: cfg, Client: fake.NewClientset(), View: nodeagenttest.NewFakeView(),
		Recorder: s3mounttest.NewEvents().Recorder, Registerer: prometheus.NewRegistry(), Clock: clock.RealClock{}}, NewOS(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := logr.NewContext(context.Background(), testr.New(t))
	deadInfo, ok := mountTableNow(t).Top(dead.MountPoint)
	if !ok {
		t.Fatalf("no mount at %s", dead.MountPoint)
	}
	liveInfo, _ := mountTableNow(t).Top(live.MountPoint)
	dead.Kill() // its mount stays, answering ENOTCONN
	check := stack.Check{Dead: []stack.Mount{deadInfo}, FUSETypes: []string{"fuse.s3fs"}}

	mkdir := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bind := func(src, dst string) {
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			t.Fatalf("bind %s onto %s: %v", src, dst, err)
		}
	}
	for _, tc := range []struct {
		name   string
		source func() string
		want   string
	}{
		{"not a mount", func() string { return mkdir("plain") }, contract.ReasonReplayResultNotVisible},
		{"plain dir of the node bound", func() string {
			p := mkdir("boundplain")
			bind(p, p)
			return p
		}, contract.ReasonReplayResultNotVisible},
		{"wrong fstype (tmpfs)", func() string {
			p := mkdir("tmpfs")
			if err := unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"); err != nil {
				t.Fatal(err)
			}
			return p
		}, contract.ReasonReplayResultWrongFilesystem},
		{"same device (a bind of the dead mount)", func() string {
			p := mkdir("samedev")
			bind(dead.MountPoint, p)
			return p
		}, contract.ReasonReplayResultSameDevice},
		{"not answering (another dead s3fs)", func() string { return dead.MountPoint }, contract.ReasonReplayResultNotAnswering},
		{"live s3fs", func() string {
			p := mkdir("live")
			bind(live.MountPoint, p)
			return p
		}, stack.ResultOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tc.source()
			c := check
			if tc.want == contract.ReasonReplayResultNotAnswering {
				c.Dead = nil // a dead mount that is not the one replaced
			}
			m, err := r.rules.Check(ctx, src, c)
			var re *stack.ResultError
			switch {
			case tc.want == stack.ResultOK:
				if err != nil || m.Dev != liveInfo.Dev {
					t.Errorf("live s3fs refused: %v (mount %+v)", err, m)
				}
			case !errors.As(err, &re) || re.Reason != tc.want:
				t.Errorf("checkMount(%s) = %v, want %s", src, err, tc.want)
			default:
				t.Logf("refused as expected: %v", err)
			}
		})
	}
	for _, reason := range []string{contract.ReasonReplayResultNotVisible, contract.ReasonReplayResultWrongFilesystem, contract.ReasonReplayResultSameDevice, contract.ReasonReplayResultNotAnswering, stack.ResultOK} {
		want := 1.0
		if reason == contract.ReasonReplayResultNotVisible {
			want = 2
		}
		if got := testCounter(t, r.metrics.ResultChecks.WithLabelValues(reason)); got != want {
			t.Errorf("result_checks{%s} = %v, want %v", reason, got, want)
		}
	}
}

func mountTableNow(t *testing.T) stack.Table {
	t.Helper()
	table, err := NewOS().Mounter.MountTable()
	if err != nil {
		t.Fatal(err)
	}
	return table
}

func testCounter(t *testing.T, c prometheus.Collector) float64 { return value(t, c) }
