//go:build node

package sidecar

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
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
		// Every thread of s3fs stopped before the probe asks: the statfs stays queued, unread,
		// and the probe's process can exit while it waits (see testenv.StopProcess).
		resume := testenv.StopProcess(t, m.Cmd.Process.Pid)
		// Should the helper still wait unkillably, s3fs runs again after 20 s: the helper then
		// returns (and fails the timing check below) instead of hanging the package's run.
		watchdog := time.AfterFunc(20*time.Second, resume)
		defer watchdog.Stop()
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

		watchdog.Stop()
		resume()
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

// A FUSE daemon that has taken the statfs request and hangs in its handler holds the caller
// beyond SIGKILL. The probe's statfs runs in a child process, so the probe still answers on time
// and exits (kubelet sees a pass, not a timeout); the child waits on, orphaned, and ends when
// the connection is aborted.
func TestProbeDaemonHoldingTheRequest(t *testing.T) {
	bin := buildHelper(t)
	h := testenv.StartHangingFUSE(t)
	// Should the probe itself wait unkillably, the connection is aborted after 15 s: the probe
	// then returns (and fails the timing check) instead of hanging the package's run.
	watchdog := time.AfterFunc(15*time.Second, func() { _ = h.Abort() })
	defer watchdog.Stop()

	res := runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "1s", h.MountPoint, "/")
	want := h.MountPoint + ": statfs timed out after 1s (hung mount: not a failure, a restart cannot help)\n/: ok\n"
	if res.code != 0 || res.stdout != want {
		t.Errorf("probe of a mount whose daemon holds the request: exit %d, stdout %q, stderr %q; want 0, %q", res.code, res.stdout, res.stderr, want)
	}
	if res.took < time.Second || res.took > 3*time.Second {
		t.Fatalf("probe with --timeout 1s took %s (exited only when the connection was aborted?)", res.took)
	}
	select {
	case <-h.Held():
	default:
		t.Fatal("the daemon never read a statfs request: the test did not make the case it is about")
	}

	// The probe's parent death made the child's SIGKILL pending: its main thread is gone
	// (a zombie leader), the thread in statfs waits on in state D.
	held := heldHelperThreads()
	if len(held) != 1 {
		out, _ := exec.Command("ps", "-eLo", "pid,lwp,ppid,stat,wchan:30,comm").CombinedOutput()
		t.Fatalf("helper threads in state D: %v, want the one statfs child\n%s", held, out)
	}
	t.Logf("probe returned after %s; its statfs child (thread %s) is left in state D, SIGKILL pending", res.took, held[0])

	if err := h.Abort(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the statfs child ends once the connection is aborted", func() error {
		if held := heldHelperThreads(); len(held) > 0 {
			return fmt.Errorf("helper threads still in state D: %v", held)
		}
		return nil
	})
}

// heldHelperThreads lists the helper's threads (comm pvrescue-sideca, as the kernel truncates
// it) in state D, as pid/tid.
func heldHelperThreads() []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*/stat")
	var held []string
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		line := string(b)
		open, closing := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
		if open < 0 || closing < open || line[open+1:closing] != "pvrescue-sideca" || testenv.ProcStatState(line) != "D" {
			continue
		}
		task := filepath.Dir(p)
		held = append(held, filepath.Base(filepath.Dir(filepath.Dir(task)))+"/"+filepath.Base(task))
	}
	return held
}
