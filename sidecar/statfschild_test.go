package sidecar

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
)

func TestStatfsAnswerRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		line string
	}{
		{"healthy", nil, "ok\n"},
		{"dead FUSE mount", syscall.ENOTCONN, "errno 107\n"},
		{"missing path", syscall.ENOENT, "errno 2\n"},
		{"not an errno", errors.New("odd\nfailure"), "error odd failure\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			line := StatfsAnswer(tc.err)
			if line != tc.line {
				t.Fatalf("StatfsAnswer(%v) = %q, want %q", tc.err, line, tc.line)
			}
			back := ParseStatfsAnswer(line)
			var want, got syscall.Errno
			switch {
			case tc.err == nil:
				if back != nil {
					t.Errorf("ParseStatfsAnswer(%q) = %v, want nil", line, back)
				}
			case errors.As(tc.err, &want):
				if !errors.As(back, &got) || got != want {
					t.Errorf("ParseStatfsAnswer(%q) = %v, want errno %v", line, back, want)
				}
			default:
				if back == nil || back.Error() != "odd failure" {
					t.Errorf("ParseStatfsAnswer(%q) = %v", line, back)
				}
			}
		})
	}
}

func TestParseStatfsAnswerMalformed(t *testing.T) {
	for _, line := range []string{"", "\n", "okay\n", "errno\n", "errno x\n", "errno 0\n", "errno -5\n", "ERRNO 5\n"} {
		if err := ParseStatfsAnswer(line); err == nil || !bytes.Contains([]byte(err.Error()), []byte("malformed")) {
			t.Errorf("ParseStatfsAnswer(%q) = %v, want a malformed-answer error", line, err)
		}
	}
}

// The child's side answers from the in-process Statfser, with exit code 0 whatever statfs said.
func TestRunStatfsChildSide(t *testing.T) {
	m := &FakeMounts{Errs: map[string]error{"/dead": syscall.ENOTCONN}}
	for path, want := range map[string]string{"/dead": "errno 107\n", "/fine": "ok\n"} {
		var out bytes.Buffer
		code := Main(context.Background(), []string{cmdStatfs, path}, &Env{Deps: Deps{Mounts: m}, Stdout: &out, Stderr: &out})
		if code != ExitOK || out.String() != want {
			t.Errorf("statfs %s: exit %d, output %q; want 0, %q", path, code, out.String(), want)
		}
	}
}

// A child that cannot be started is not a failed mount: statfs is called here instead.
func TestChildStatfsFallsBackWhenNoChildStarts(t *testing.T) {
	m := &FakeMounts{Errs: map[string]error{"/dead": syscall.ENOTCONN}}
	c := ChildStatfs{Exe: "/nonexistent/pvrescue-sidecar", Fallback: m}
	if err := c.Statfs("/fine"); err != nil {
		t.Errorf("fallback statfs of /fine: %v", err)
	}
	if err := c.Statfs("/dead"); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("fallback statfs of /dead: %v, want ENOTCONN", err)
	}
}

// RunProbe goes through ProbeMounts when set, Mounts otherwise.
func TestRunProbeUsesProbeMounts(t *testing.T) {
	here := &FakeMounts{}
	child := &FakeMounts{Errs: map[string]error{"/m": syscall.ENOTCONN}}
	var out bytes.Buffer
	code := RunProbe(context.Background(), &ProbeOptions{Timeout: DefaultProbeTimeout, Paths: []string{"/m"}}, &Env{Deps: Deps{Mounts: here, ProbeMounts: child}, Stdout: &out, Stderr: &out})
	if code != 1 || out.String() != "/m: transport endpoint is not connected (ENOTCONN)\n" {
		t.Errorf("probe through ProbeMounts: exit %d, output %q", code, out.String())
	}
}
