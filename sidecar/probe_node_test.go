//go:build node

package sidecar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
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

// s3fsMount is a real s3fs FUSE mount of a versitygw bucket, run in the foreground so the test
// can stop and kill its daemon.
type s3fsMount struct {
	mnt string
	cmd *exec.Cmd
	log *bytes.Buffer
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startS3 runs versitygw on a free port over a temporary directory with one bucket.
func startS3(t *testing.T, bucket string) (url, access, secret string) {
	t.Helper()
	gw := testenv.Binary(t, "versitygw", "versitygw")
	data := t.TempDir()
	if err := os.Mkdir(filepath.Join(data, bucket), 0o755); err != nil {
		t.Fatal(err)
	}
	access, secret = "pvrescuetest", "pvrescue-test-secret"
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var log bytes.Buffer
	cmd := exec.Command(gw, "--access", access, "--secret", secret, "--port", addr, "posix", data)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			break
		}
		if i == 100 {
			t.Fatalf("versitygw did not listen on %s within 10s: %v\n%s", addr, err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "http://" + addr, access, secret
}

func mountS3fs(t *testing.T) *s3fsMount {
	t.Helper()
	testenv.RequireRoot(t)
	s3fs := testenv.RequireCommand(t, "s3fs", "apt-get install s3fs fuse3")
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("/dev/fuse is missing (%v): load the fuse module (modprobe fuse)", err)
	}
	const bucket = "probe"
	url, access, secret := startS3(t, bucket)
	tmp := t.TempDir()
	passwd := filepath.Join(tmp, "passwd")
	if err := os.WriteFile(passwd, []byte(access+":"+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := &s3fsMount{mnt: filepath.Join(tmp, "mnt"), log: &bytes.Buffer{}}
	if err := os.Mkdir(m.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	m.cmd = exec.Command(s3fs, bucket, m.mnt, "-f", "-o", "passwd_file="+passwd, "-o", "url="+url, "-o", "use_path_request_style")
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start s3fs: %v", err)
	}
	// Registered after the temp dirs, so it runs before they are removed: resume, stop, unmount.
	t.Cleanup(func() {
		_ = m.cmd.Process.Signal(syscall.SIGCONT)
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
		lazyUnmount(t, m.mnt)
	})
	for i := 0; ; i++ {
		if ok, fstype := isMountPoint(t, m.mnt); ok && strings.HasPrefix(fstype, "fuse") {
			break
		}
		if m.cmd.ProcessState != nil || i == 100 {
			t.Fatalf("s3fs did not mount %s within 10s\n%s", m.mnt, m.log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return m
}

func TestProbeS3fsStoppedThenKilled(t *testing.T) {
	bin := buildHelper(t)
	m := mountS3fs(t)
	if err := os.WriteFile(filepath.Join(m.mnt, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatalf("write through s3fs: %v\n%s", err, m.log.String())
	}

	res := runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "3s", m.mnt)
	if res.code != 0 || res.stdout != m.mnt+": ok\n" {
		t.Fatalf("healthy s3fs: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	t.Logf("probe of a healthy s3fs mount: %s", res.took)

	t.Run("daemon stopped: timeout", func(t *testing.T) {
		if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		resumed := false
		defer func() {
			if !resumed {
				_ = m.cmd.Process.Signal(syscall.SIGCONT)
			}
		}()
		res := runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "1s", m.mnt, "/")
		want := m.mnt + ": statfs timed out after 1s (hung mount?)\n/: ok\n"
		if res.code != 1 || res.stdout != want {
			t.Errorf("stopped s3fs: exit %d, stdout %q, stderr %q; want 1, %q", res.code, res.stdout, res.stderr, want)
		}
		if res.took < time.Second || res.took > 3*time.Second {
			t.Errorf("probe with --timeout 1s on a hung mount took %s", res.took)
		}
		t.Logf("probe of a stopped s3fs with --timeout 1s returned after %s", res.took)

		// In process too: Probe returns on time while its goroutine stays blocked in statfs.
		start := time.Now()
		rs := Probe(context.Background(), RealDeps().Mounts, []string{m.mnt}, 500*time.Millisecond)
		if took := time.Since(start); !errors.Is(rs[0].Err, ErrProbeTimeout) || took > 2*time.Second {
			t.Errorf("in-process probe: %v after %s", rs[0].Err, took)
		}

		if err := m.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		resumed = true
		res = runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "3s", m.mnt)
		if res.code != 0 {
			t.Errorf("after SIGCONT: exit %d, stdout %q", res.code, res.stdout)
		}
	})

	t.Run("daemon killed: ENOTCONN", func(t *testing.T) {
		if err := m.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = m.cmd.Wait()
		res := runHelper(t, bin, nil, contract.CmdProbe, contract.FlagTimeout, "3s", "/", m.mnt)
		want := "/: ok\n" + m.mnt + ": transport endpoint is not connected (ENOTCONN)\n"
		if res.code != 1 || res.stdout != want {
			t.Errorf("killed s3fs: exit %d, stdout %q, stderr %q; want 1, %q", res.code, res.stdout, res.stderr, want)
		}
		t.Logf("probe of a dead s3fs mount: %s, output %q", res.took, res.stdout)
	})
}
