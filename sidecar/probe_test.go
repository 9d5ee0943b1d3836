package sidecar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	m := &FakeMounts{
		Errs: map[string]error{"/mnt/dead": syscall.ENOTCONN, "/mnt/io": syscall.EIO, "/mnt/stale": syscall.ESTALE},
		Hang: map[string]bool{"/mnt/hung": true},
	}
	defer m.Release()
	paths := []string{"/mnt/ok", "/mnt/dead", "/mnt/hung", "/mnt/io", "/mnt/stale"}
	start := time.Now()
	rs := Probe(context.Background(), m, paths, 200*time.Millisecond)
	took := time.Since(start)
	if took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("probe with a hung path took %s, want about the 200ms timeout", took)
	}
	for i, p := range paths {
		if rs[i].Path != p {
			t.Errorf("result %d is for %s, want %s (order of paths)", i, rs[i].Path, p)
		}
	}
	if rs[0].Err != nil {
		t.Errorf("/mnt/ok: %v", rs[0].Err)
	}
	for i, want := range map[int]error{1: syscall.ENOTCONN, 2: ErrProbeTimeout, 3: syscall.EIO, 4: syscall.ESTALE} {
		if !errors.Is(rs[i].Err, want) {
			t.Errorf("%s: err = %v, want %v", rs[i].Path, rs[i].Err, want)
		}
	}
	if Healthy(rs) {
		t.Error("Healthy() = true with broken paths")
	}
	want := "/mnt/ok: ok\n" +
		"/mnt/dead: transport endpoint is not connected (ENOTCONN)\n" +
		"/mnt/hung: statfs timed out after 200ms (hung mount: not a failure, a restart cannot help)\n" +
		"/mnt/io: input/output error (EIO)\n" +
		"/mnt/stale: stale file handle (ESTALE)\n"
	if got := FormatProbe(rs); got != want {
		t.Errorf("FormatProbe:\n got %q\nwant %q", got, want)
	}
}

// A hung mount alone does not fail the probe (a restart cannot help); a dead one does.
func TestProbeHungIsNotAFailure(t *testing.T) {
	m := &FakeMounts{Errs: map[string]error{"/dead": syscall.ENOTCONN}, Hang: map[string]bool{"/hung": true}}
	defer m.Release()
	for _, tt := range []struct {
		paths []string
		code  int
	}{{[]string{"/ok", "/hung"}, 0}, {[]string{"/hung", "/dead"}, 1}} {
		var out bytes.Buffer
		code := RunProbe(context.Background(), &ProbeOptions{Timeout: 100 * time.Millisecond, Paths: tt.paths}, &Env{Deps: Deps{Mounts: m}, Stdout: &out, Stderr: &out})
		if code != tt.code {
			t.Errorf("probe %v: exit %d, want %d (output %q)", tt.paths, code, tt.code, out.String())
		}
	}
}

func TestProbeAllHealthyReturnsAtOnce(t *testing.T) {
	start := time.Now()
	rs := Probe(context.Background(), &FakeMounts{}, []string{"/a", "/b", "/c"}, time.Minute)
	if took := time.Since(start); took > time.Second {
		t.Errorf("healthy probe took %s, it must not wait for the timeout", took)
	}
	if !Healthy(rs) {
		t.Errorf("Healthy() = false: %+v", rs)
	}
}

func TestProbeStopsOnContextCancel(t *testing.T) {
	m := &FakeMounts{Hang: map[string]bool{"/hung": true}}
	defer m.Release()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	rs := Probe(ctx, m, []string{"/hung"}, time.Minute)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("cancelled probe took %s", took)
	}
	if !errors.Is(rs[0].Err, ErrProbeTimeout) {
		t.Errorf("err = %v, want ErrProbeTimeout", rs[0].Err)
	}
}

func TestDescribeError(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{syscall.ENOTCONN, "transport endpoint is not connected (ENOTCONN)"},
		{fmt.Errorf("statfs /x: %w", syscall.ENOENT), "statfs /x: no such file or directory (ENOENT)"},
		{errors.New("plain"), "plain"},
	}
	for _, tt := range tests {
		if got := DescribeError(tt.err); got != tt.want {
			t.Errorf("DescribeError(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

func TestRunProbeExitCodes(t *testing.T) {
	m := &FakeMounts{Errs: map[string]error{"/dead": syscall.ENOTCONN}}
	for _, tt := range []struct {
		paths []string
		code  int
	}{{[]string{"/ok"}, 0}, {[]string{"/ok", "/dead"}, 1}} {
		var out bytes.Buffer
		code := RunProbe(context.Background(), &ProbeOptions{Timeout: time.Second, Paths: tt.paths}, &Env{Deps: Deps{Mounts: m}, Stdout: &out, Stderr: &out})
		if code != tt.code {
			t.Errorf("probe %v: exit %d, want %d (output %q)", tt.paths, code, tt.code, out.String())
		}
	}
}
