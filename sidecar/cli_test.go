package sidecar

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Invocation
		wantErr error
	}{
		{
			name: "guard as the webhook injects it",
			args: []string{"guard", "--device", "/dev/data1=claimA", "--device", "/dev/data2=claimB", "--policy", "require", "--out", "/pvrescue", "--fake-size", "512"},
			want: Invocation{Command: "guard", Options: &GuardOptions{
				Devices: []DeviceSpec{{"/dev/data1", "claimA"}, {"/dev/data2", "claimB"}},
				Policy:  "require", Out: "/pvrescue", FakeSize: 512, TerminationLog: "/dev/termination-log",
			}},
		},
		{
			name: "guard defaults and = syntax",
			args: []string{"guard", "--device=/dev/data1=claimA", "--termination-log="},
			want: Invocation{Command: "guard", Options: &GuardOptions{
				Devices: []DeviceSpec{{"/dev/data1", "claimA"}}, Policy: "filter", Out: "/pvrescue", FakeSize: 512,
			}},
		},
		{name: "guard without devices", args: []string{"guard"}, wantErr: ErrUsage},
		{name: "guard bad device", args: []string{"guard", "--device", "data1"}, wantErr: ErrUsage},
		{name: "guard bad policy", args: []string{"guard", "--device", "/dev/a=b", "--policy", "maybe"}, wantErr: ErrUsage},
		{name: "guard bad fake size", args: []string{"guard", "--device", "/dev/a=b", "--fake-size", "half"}, wantErr: ErrUsage},
		{name: "guard stray argument", args: []string{"guard", "--device", "/dev/a=b", "extra"}, wantErr: ErrUsage},
		{
			name: "install",
			args: []string{"install", "--to", "/pvrescue/bin"},
			want: Invocation{Command: "install", Options: &InstallOptions{To: "/pvrescue/bin"}},
		},
		{name: "install default", args: []string{"install"}, want: Invocation{Command: "install", Options: &InstallOptions{To: "/pvrescue/bin"}}},
		{
			name: "exec as the webhook wraps a command",
			args: []string{"exec", "--devices", "/pvrescue/devices.json", "--", "/app/server", "--port", "80", "-v"},
			want: Invocation{Command: "exec", Options: &ExecOptions{DevicesFile: "/pvrescue/devices.json", Command: []string{"/app/server", "--port", "80", "-v"}}},
		},
		{
			name: "exec keeps a second -- for the command",
			args: []string{"exec", "--", "sh", "-c", "exit 7", "--", "x"},
			want: Invocation{Command: "exec", Options: &ExecOptions{DevicesFile: "/pvrescue/devices.json", Command: []string{"sh", "-c", "exit 7", "--", "x"}}},
		},
		{name: "exec without command", args: []string{"exec", "--devices", "/x"}, wantErr: ErrUsage},
		{
			name: "probe",
			args: []string{"probe", "--timeout", "3s", "/mnt/a", "/mnt/b"},
			want: Invocation{Command: "probe", Options: &ProbeOptions{Timeout: 3 * time.Second, Paths: []string{"/mnt/a", "/mnt/b"}}},
		},
		{name: "probe default timeout", args: []string{"probe", "/mnt/a"}, want: Invocation{Command: "probe", Options: &ProbeOptions{Timeout: 3 * time.Second, Paths: []string{"/mnt/a"}}}},
		{name: "probe without paths", args: []string{"probe", "--timeout", "1s"}, wantErr: ErrUsage},
		{name: "probe zero timeout", args: []string{"probe", "--timeout", "0s", "/mnt/a"}, wantErr: ErrUsage},
		{name: "probe flag after path", args: []string{"probe", "/mnt/a", "--timeout", "1s"}, wantErr: ErrUsage},
		{name: "statfs child", args: []string{"statfs", "/mnt/a"}, want: Invocation{Command: "statfs", Options: &statfsOptions{Path: "/mnt/a"}}},
		{name: "statfs child without a path", args: []string{"statfs"}, wantErr: ErrUsage},
		{name: "statfs child with two paths", args: []string{"statfs", "/mnt/a", "/mnt/b"}, wantErr: ErrUsage},
		{name: "no command", args: nil, wantErr: ErrUsage},
		{name: "unknown command", args: []string{"frobnicate"}, wantErr: ErrUsage},
		{name: "unknown flag", args: []string{"install", "--from", "/x"}, wantErr: ErrUsage},
		{name: "help", args: []string{"--help"}, wantErr: flag.ErrHelp},
		{name: "subcommand help", args: []string{"probe", "-h"}, wantErr: flag.ErrHelp},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.args, io.Discard)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Parse(%q) error = %v, want %v", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.args, err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tt.args, d)
			}
		})
	}
}

func TestMainExitCodes(t *testing.T) {
	var out bytes.Buffer
	env := &Env{Stdout: &out, Stderr: &out}
	if code := Main(context.Background(), []string{"nope"}, env); code != ExitError {
		t.Errorf("unknown command: exit %d, want %d", code, ExitError)
	}
	if !strings.Contains(out.String(), "usage: pvrescue-sidecar") {
		t.Errorf("no usage printed: %q", out.String())
	}
	if code := Main(context.Background(), []string{"help"}, env); code != ExitOK {
		t.Errorf("help: exit %d, want 0", code)
	}
}

// The helper runs in every injected pod and as a livenessProbe: it must not link Kubernetes
// client code (size, start-up time, attack surface).
func TestHelperImportGraphHasNoKubernetes(t *testing.T) {
	goBin := testenv.RequireCommand(t, "go", "install Go 1.26")
	cmd := exec.Command(goBin, "list", "-deps", "./cmd/pvrescue-sidecar")
	cmd.Dir = testenv.RepoRoot()
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !contains(deps, "github.com/pvrescue/pvrescue/sidecar") {
		t.Fatalf("go list output does not include the sidecar package: %q", out)
	}
	if bad := forbiddenImports(deps); len(bad) > 0 {
		t.Errorf("pvrescue-sidecar imports forbidden packages: %v", bad)
	}
	t.Logf("pvrescue-sidecar imports %d packages", len(deps))
}

// forbiddenImports returns the packages the helper must not link.
func forbiddenImports(deps []string) []string {
	forbidden := []string{"k8s.io/", "sigs.k8s.io/", "github.com/spf13/cobra", "go.uber.org/zap", "github.com/prometheus/", "github.com/pvrescue/pvrescue/internal/config", "runtime/cgo"}
	var bad []string
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				bad = append(bad, d)
			}
		}
	}
	return bad
}

func TestForbiddenImports(t *testing.T) {
	deps := []string{"fmt", "golang.org/x/sys/unix", "k8s.io/client-go/rest", "sigs.k8s.io/controller-runtime", "runtime/cgo", "github.com/pvrescue/pvrescue/sidecar", "github.com/pvrescue/pvrescue/internal/config"}
	want := []string{"k8s.io/client-go/rest", "sigs.k8s.io/controller-runtime", "runtime/cgo", "github.com/pvrescue/pvrescue/internal/config"}
	if d := cmp.Diff(want, forbiddenImports(deps)); d != "" {
		t.Errorf("forbiddenImports (-want +got):\n%s", d)
	}
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
