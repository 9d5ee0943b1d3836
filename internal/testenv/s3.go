package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Test keys of the S3 servers the tests start (never real credentials).
const (
	TestAccessKey = "AKIATESTPVRESCUE"
	TestSecretKey = "sEcReTkEy-pvrescue-0123456789"
)

// S3Config is one versitygw S3 server (posix backend: each directory under Dir is a bucket).
type S3Config struct {
	Addr      string // host:port it listens on
	Dir       string
	AccessKey string
	SecretKey string
}

// Args is versitygw's command line. The keys are not on it: they go through Env.
func (c S3Config) Args() []string { return []string{"--port", c.Addr, "posix", c.Dir} }

// Env carries the root keys to versitygw, so they never show in a process listing.
func (c S3Config) Env() []string {
	return []string{"ROOT_ACCESS_KEY_ID=" + c.AccessKey, "ROOT_SECRET_ACCESS_KEY=" + c.SecretKey}
}

// Endpoint is the server's URL.
func (c S3Config) Endpoint() string { return "http://" + c.Addr }

// Bucket creates a bucket (a directory of the posix backend) and returns its directory.
func (c S3Config) Bucket(name string) (string, error) {
	d := filepath.Join(c.Dir, name)
	return d, os.MkdirAll(d, 0o755)
}

// S3Server is a running versitygw.
type S3Server struct {
	S3Config
	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	err  error
}

// StartS3Server starts versitygw (binary bin) with its output to log and waits until it listens.
func StartS3Server(ctx context.Context, bin string, c S3Config, log io.Writer) (*S3Server, error) {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, c.Args()...)
	cmd.Env = append(os.Environ(), c.Env()...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start versitygw: %w", err)
	}
	s := &S3Server{S3Config: c, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
	}()
	err := WaitListening(ctx, c.Addr, s.Exited)
	if err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("versitygw at %s: %w", c.Addr, err)
	}
	return s, nil
}

// ErrExited is wrapped by the errors of processes that ended while they should run.
var ErrExited = errors.New("process exited")

// Exited is nil while the server runs.
func (s *S3Server) Exited() error {
	select {
	case <-s.done:
		s.mu.Lock()
		defer s.mu.Unlock()
		return fmt.Errorf("versitygw: %w (%w)", ErrExited, s.err)
	default:
		return nil
	}
}

// Stop kills the server and waits for it.
func (s *S3Server) Stop() error {
	_ = s.cmd.Process.Kill()
	<-s.done
	return nil
}

// WaitListening waits until addr accepts connections; exited (may be nil) reports a server
// process that ended, which ends the wait at once.
func WaitListening(ctx context.Context, addr string, exited func() error) error {
	return Poll(ctx, 50*time.Millisecond, func(ctx context.Context) (bool, error) {
		if exited != nil {
			if err := exited(); err != nil {
				return false, Abort(err)
			}
		}
		return Listening(ctx, addr)
	})
}

// S3 starts versitygw (bin/versitygw, `make versitygw`) on a free local port over a temp dir
// holding the given buckets, with the test keys, for the test; its log goes to the test log when
// it fails to start.
func S3(t testing.TB, buckets ...string) *S3Server {
	t.Helper()
	bin := Binary(t, "versitygw", "versitygw")
	c := S3Config{Addr: Addr("127.0.0.1", FreePort(t)), Dir: t.TempDir(), AccessKey: TestAccessKey, SecretKey: TestSecretKey}
	for _, b := range buckets {
		if _, err := c.Bucket(b); err != nil {
			t.Fatal(err)
		}
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, err := StartS3Server(ctx, bin, c, log)
	if err != nil {
		b, _ := os.ReadFile(log.Name())
		_ = log.Close() // the start's error is the one reported
		t.Fatalf("%v\n%s", err, b)
	}
	t.Cleanup(func() {
		_ = s.Stop() // Stop reports how the server ended; the test is over
		if err := log.Close(); err != nil {
			t.Errorf("close the S3 server's log: %v", err)
		}
	})
	return s
}
