//go:build linux

package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// S3fsSpec is one s3fs mount of a bucket of an S3 server.
type S3fsSpec struct {
	Source     string // "bucket" or "bucket:/prefix"
	MountPoint string // made when missing
	PasswdFile string // written (0600, as s3fs demands) with the server's keys
	Options    []string
	// OwnGroup starts s3fs in a process group of its own, as a CSI driver's child would be.
	OwnGroup bool
}

// S3fsMount is a running s3fs in the foreground (-f), so its daemon can be stopped and killed.
type S3fsMount struct {
	MountPoint string
	Cmd        *exec.Cmd
	done       chan struct{}
	mu         sync.Mutex
	log        bytes.Buffer
}

// Log is what s3fs printed so far.
func (m *S3fsMount) Log() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.String()
}

func (m *S3fsMount) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.Write(p)
}

// Done is closed when the s3fs process has ended (and been reaped).
func (m *S3fsMount) Done() <-chan struct{} { return m.done }

// Kill kills s3fs (resuming it first, should it be stopped) and waits for it to end. The mount
// stays, dead: every access fails with ENOTCONN until it is unmounted.
func (m *S3fsMount) Kill() {
	_ = m.Cmd.Process.Signal(syscall.SIGCONT)
	_ = m.Cmd.Process.Kill()
	<-m.done
}

// StartS3fs runs s3fs for spec against s and waits until the FUSE mount is there.
func StartS3fs(ctx context.Context, s S3Config, spec S3fsSpec) (*S3fsMount, error) {
	bin, err := exec.LookPath("s3fs")
	if err != nil {
		return nil, fmt.Errorf("s3fs not found (apt-get install s3fs; make node-deps): %w", err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("/dev/fuse is missing (modprobe fuse; make node-deps): %w", err)
	}
	if err := os.MkdirAll(spec.MountPoint, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(spec.PasswdFile, []byte(s.AccessKey+":"+s.SecretKey+"\n"), 0o600); err != nil {
		return nil, err
	}
	args := []string{spec.Source, spec.MountPoint, "-f", "-o", "passwd_file=" + spec.PasswdFile,
		"-o", "url=" + s.Endpoint(), "-o", "use_path_request_style"}
	for _, o := range spec.Options {
		args = append(args, "-o", o)
	}
	m := &S3fsMount{MountPoint: spec.MountPoint, done: make(chan struct{})}
	m.Cmd = exec.Command(bin, args...)
	m.Cmd.Stdout, m.Cmd.Stderr = m, m
	if spec.OwnGroup {
		m.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if err := m.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start s3fs: %w", err)
	}
	go func() { _ = m.Cmd.Wait(); close(m.done) }()
	err = Poll(ctx, 20*time.Millisecond, func(context.Context) (bool, error) {
		select {
		case <-m.done:
			return false, Abort(fmt.Errorf("s3fs: %w: %s", ErrExited, strings.TrimSpace(m.Log())))
		default:
		}
		ok, fstype := MountedAt(spec.MountPoint)
		return ok && strings.HasPrefix(fstype, "fuse"), nil
	})
	if err != nil {
		m.Kill()
		_ = LazyUnmount(spec.MountPoint)
		return nil, fmt.Errorf("s3fs did not mount %s: %w\n%s", spec.MountPoint, err, m.Log())
	}
	return m, nil
}

// S3fs mounts bucket of s with s3fs at a temp dir for the test. When the test ends s3fs is
// resumed, killed, and its mount detached.
func S3fs(t testing.TB, s *S3Server, bucket string, options ...string) *S3fsMount {
	t.Helper()
	RequireRoot(t)
	RequireCommand(t, "s3fs", "apt-get install s3fs fuse3")
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	m, err := StartS3fs(ctx, s.S3Config, S3fsSpec{Source: bucket, MountPoint: filepath.Join(tmp, "mnt"),
		PasswdFile: filepath.Join(tmp, "passwd"), Options: options})
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the temp dir, so it runs before the dir is removed.
	t.Cleanup(func() {
		m.Kill()
		if err := LazyUnmount(m.MountPoint); err != nil {
			t.Error(err)
		}
	})
	return m
}
