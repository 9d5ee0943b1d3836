package kubecmd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
)

func TestParseLevel(t *testing.T) {
	for in, want := range map[string]zapcore.Level{"info": zapcore.InfoLevel, "debug": zapcore.DebugLevel, "ERROR": zapcore.ErrorLevel,
		"warn": zapcore.WarnLevel, "1": zapcore.Level(-1), "4": zapcore.Level(-4)} {
		got, err := ParseLevel(in)
		if err != nil || got != want {
			t.Errorf("ParseLevel(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "loud", "0", "-3", "200"} {
		if _, err := ParseLevel(in); !errors.Is(err, ErrInvalidLogLevel) {
			t.Errorf("ParseLevel(%q) = %v, want ErrInvalidLogLevel", in, err)
		}
	}
}

// TestExecuteLogLevel proves the flag reaches the logger in the command's context: V(1) logs
// are off by default and on with --zap-log-level=debug or a verbosity.
func TestExecuteLogLevel(t *testing.T) {
	for _, tt := range []struct {
		args     []string
		v1, v3   bool
		wantCode int
	}{
		{args: nil},
		{args: []string{"--zap-log-level=debug"}, v1: true},
		{args: []string{"--zap-log-level", "3"}, v1: true, v3: true},
		{args: []string{"--zap-log-level=loud"}, wantCode: 1},
		{args: []string{"--no-such-flag"}, wantCode: 1},
	} {
		ran := false
		var v1, v3 bool
		cmd := &cobra.Command{Use: "x", SilenceUsage: true, SilenceErrors: true, RunE: func(c *cobra.Command, _ []string) error {
			ran = true
			log := logr.FromContextOrDiscard(c.Context())
			v1, v3 = log.V(1).Enabled(), log.V(3).Enabled()
			return nil
		}}
		cmd.SetArgs(tt.args)
		code := Execute(context.Background(), cmd)
		if code != tt.wantCode {
			t.Errorf("%v: exit code %d, want %d", tt.args, code, tt.wantCode)
		}
		if tt.wantCode != 0 {
			if ran {
				t.Errorf("%v: command ran despite bad flags", tt.args)
			}
			continue
		}
		if !ran || v1 != tt.v1 || v3 != tt.v3 {
			t.Errorf("%v: ran %v, V(1) %v, V(3) %v; want V(1) %v, V(3) %v", tt.args, ran, v1, v3, tt.v1, tt.v3)
		}
	}
}

func TestExecuteReturnsOneOnError(t *testing.T) {
	cmd := &cobra.Command{Use: "x", SilenceUsage: true, SilenceErrors: true,
		RunE: func(*cobra.Command, []string) error { return errors.New("boom") }}
	cmd.SetArgs(nil)
	if code := Execute(context.Background(), cmd); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
}

func TestRESTConfig(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := RESTConfig(kc)
	if err != nil || c.Host != "https://10.0.0.1:6443" {
		t.Fatalf("RESTConfig(file) = %+v, %v", c, err)
	}
	t.Setenv("KUBECONFIG", kc)
	if c, err := RESTConfig(""); err != nil || c.Host != "https://10.0.0.1:6443" {
		t.Fatalf("RESTConfig with $KUBECONFIG = %+v, %v", c, err)
	}
	if _, err := RESTConfig(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing kubeconfig file was accepted")
	}
}

type opts struct{ ok bool }

func (o *opts) Validate() error {
	if !o.ok {
		return errors.New("invalid")
	}
	return nil
}

func TestRunEValidatesFirst(t *testing.T) {
	ran := false
	run := func(context.Context, *opts) error { ran = true; return nil }
	if err := RunE(&opts{}, run)(&cobra.Command{}, nil); err == nil || ran {
		t.Fatalf("invalid options: err %v, ran %v", err, ran)
	}
	if err := RunE(&opts{ok: true}, run)(&cobra.Command{}, nil); err != nil || !ran {
		t.Fatalf("valid options: err %v, ran %v", err, ran)
	}
}
