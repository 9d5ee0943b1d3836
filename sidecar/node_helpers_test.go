//go:build node

package sidecar

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

var (
	helperOnce sync.Once
	helperPath string
	helperErr  error
	helperDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if helperDir != "" {
		_ = os.RemoveAll(helperDir) // a temporary directory: a leftover is harmless
	}
	os.Exit(code)
}

// buildHelper builds pvrescue-sidecar the way it ships (CGO_ENABLED=0) once per test binary.
func buildHelper(t *testing.T) string {
	t.Helper()
	goBin := testenv.RequireCommand(t, "go", "install Go 1.26")
	helperOnce.Do(func() {
		helperDir, helperErr = os.MkdirTemp("", "pvrescue-sidecar-build-")
		if helperErr != nil {
			return
		}
		helperPath = filepath.Join(helperDir, "pvrescue-sidecar")
		cmd := exec.Command(goBin, "build", "-trimpath", "-ldflags", "-s -w", "-o", helperPath, "./cmd/pvrescue-sidecar")
		cmd.Dir = testenv.RepoRoot()
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			helperErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if helperErr != nil {
		t.Fatal(helperErr)
	}
	return helperPath
}

// result is one run of the helper as a subprocess.
type result struct {
	code           int
	stdout, stderr string
	pid            int
	took           time.Duration
}

// runHelper runs the helper with args; extraEnv is appended to the environment. A run that
// does not end within a minute is killed and fails the test (a hung probe is a bug).
func runHelper(t *testing.T, bin string, extraEnv []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	err := cmd.Wait()
	r := result{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String(), pid: cmd.Process.Pid, took: time.Since(start)}
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not finish within a minute (killed): %v\nstdout: %s\nstderr: %s", bin, strings.Join(args, " "), err, r.stdout, r.stderr)
	}
	return r
}

// run runs a host command and fails the test on error.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// attachLoop attaches a sparse image of size bytes (in dir) to a free loop device of the tests'
// range and returns its node; the device and any node made for it go when the test ends.
func attachLoop(t *testing.T, dir string, size int64) string {
	t.Helper()
	return testenv.LoopDevice(t, dir, size).Dev
}

// mknodLike makes a block node at path with the same device number as dev, the way a container
// runtime creates /dev/dataN for a volumeDevice.
func mknodLike(t *testing.T, path, dev string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatalf("stat %s: %v", dev, err)
	}
	if err := unix.Mknod(path, unix.S_IFBLK|0o660, int(st.Rdev)); err != nil {
		t.Fatalf("mknod %s like %s: %v", path, dev, err)
	}
}

// mknodChar makes a character node at path with the device number of /dev/null.
func mknodChar(t *testing.T, path string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat("/dev/null", &st); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(st.Rdev)); err != nil {
		t.Fatalf("mknod %s: %v", path, err)
	}
}

// lazyUnmount detaches a mount even when its FUSE daemon is dead or stopped.
func lazyUnmount(t *testing.T, path string) {
	t.Helper()
	if err := testenv.LazyUnmount(path); err != nil {
		t.Error(err)
	}
}
