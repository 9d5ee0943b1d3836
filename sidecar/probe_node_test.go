//go:build node

package sidecar

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

func TestProbeHealthyTmpfs(t *testing.T) {
	testenv.RequireRoot(t)
	bin := buildHelper(t)
	mnt := t.TempDir()
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { lazyUnmount(t, mnt) })

	start := time.Now()
	rs := Probe(context.Background(), RealDeps().Mounts, []string{mnt}, 3*time.Second)
	inProcess := time.Since(start)
	if !Healthy(rs) {
		t.Fatalf("in-process probe of a tmpfs: %s", FormatProbe(rs))
	}
	var took []time.Duration
	for range 20 {
		res := runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "3s", mnt, "/")
		if res.code != 0 || res.stdout != mnt+": ok\n/: ok\n" {
			t.Fatalf("probe exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
		}
		took = append(took, res.took)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	t.Logf("probe latency on a healthy tmpfs: in-process %s; whole process (exec to exit) min %s, median %s, max %s over %d runs",
		inProcess, took[0], took[len(took)/2], took[len(took)-1], len(took))
	if took[len(took)/2] > time.Second {
		t.Errorf("median probe took %s; a probe should take milliseconds", took[len(took)/2])
	}

	// A path that is not there is a failure with its errno, not a hang.
	res := runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "3s", mnt, filepath.Join(mnt, "missing"))
	if res.code != 1 || !strings.Contains(res.stdout, "missing: no such file or directory (ENOENT)") {
		t.Errorf("missing path: exit %d, stdout %q", res.code, res.stdout)
	}
}

func TestProbeS3fsStoppedThenKilled(t *testing.T) {
	bin := buildHelper(t)
	m := testenv.S3fs(t, testenv.S3(t, "probe"), "probe")
	if err := os.WriteFile(filepath.Join(m.MountPoint, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("write through s3fs: %v\n%s", err, m.Log())
	}

	res := runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "3s", m.MountPoint)
	if res.code != 0 || res.stdout != m.MountPoint+": ok\n" {
		t.Fatalf("healthy s3fs: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	t.Logf("probe of a healthy s3fs mount: %s", res.took)

	t.Run("daemon stopped: timeout", func(t *testing.T) {
		if err := m.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = m.Cmd.Process.Signal(syscall.SIGCONT)
			}
		}()
		res := runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "1s", m.MountPoint, "/")
		// Hung, not dead: the probe reports it but passes (a container restart cannot help).
		want := m.MountPoint + ": statfs timed out after 1s (hung mount: not a failure, a restart cannot help)\n/: ok\n"
		if res.code != 0 || res.stdout != want {
			t.Errorf("stopped s3fs: exit %d, stdout %q, stderr %q; want 0, %q", res.code, res.stdout, res.stderr, want)
		}
		if res.took < time.Second || res.took > 3*time.Second {
			t.Errorf("probe with --timeout 1s on a hung mount took %s", res.took)
		}
		t.Logf("probe of a stopped s3fs with --timeout 1s returned after %s", res.took)

		// In process too: Probe returns on time while its goroutine stays blocked in statfs.
		start := time.Now()
		rs := Probe(context.Background(), RealDeps().Mounts, []string{m.MountPoint}, 500*time.Millisecond)
		if took := time.Since(start); !errors.Is(rs[0].Err, ErrProbeTimeout) || took > 2*time.Second {
			t.Errorf("in-process probe: %v after %s", rs[0].Err, took)
		}

		if err := m.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumed = true
		res = runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "3s", m.MountPoint)
		if res.code != 0 {
			t.Errorf("after SIGCONT: exit %d, stdout %q", res.code, res.stdout)
		}
	})

	t.Run("daemon killed: ENOTCONN", func(t *testing.T) {
		m.Kill()
		res := runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "3s", "/", m.MountPoint)
		want := "/: ok\n" + m.MountPoint + ": transport endpoint is not connected (ENOTCONN)\n"
		if res.code != 1 || res.stdout != want {
			t.Errorf("killed s3fs: exit %d, stdout %q, stderr %q; want 1, %q", res.code, res.stdout, res.stderr, want)
		}
		t.Logf("probe of a dead s3fs mount: %s, output %q", res.took, res.stdout)
	})
}
