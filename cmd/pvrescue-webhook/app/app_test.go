package app

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestServeFlags(t *testing.T) {
	t.Setenv(NamespaceEnv, "")
	defaults := *NewOptions()
	tests := []struct {
		name    string
		env     string
		args    []string
		want    func(o *Options)
		wantErr error
	}{
		{name: "defaults", want: func(*Options) {}},
		{name: "all flags", args: []string{"--config", "/etc/pvrescue/config.yaml", "--cert-dir", "/certs", "--port", "8443",
			"--metrics-bind-address", "0", "--health-probe-bind-address", ":9000", "--namespace", "rescue", "--kubeconfig", "/kc"},
			want: func(o *Options) {
				o.ConfigFile, o.CertDir, o.Port = "/etc/pvrescue/config.yaml", "/certs", 8443
				o.MetricsBindAddress, o.HealthProbeBindAddress, o.Namespace, o.Kubeconfig = "0", ":9000", "rescue", "/kc"
			}},
		{name: "namespace from env", env: "from-env", want: func(o *Options) { o.Namespace = "from-env" }},
		{name: "flag beats env", env: "from-env", args: []string{"--namespace", "flag"}, want: func(o *Options) { o.Namespace = "flag" }},
		{name: "port out of range", args: []string{"--port", "70000"}, wantErr: ErrInvalidOptions},
		{name: "empty cert dir", args: []string{"--cert-dir", ""}, wantErr: ErrInvalidOptions},
		{name: "empty namespace", args: []string{"--namespace", ""}, wantErr: ErrInvalidOptions},
		{name: "empty metrics address", args: []string{"--metrics-bind-address", ""}, wantErr: ErrInvalidOptions},
		{name: "positional argument", args: []string{"extra"}, wantErr: errAny},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: errAny},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(NamespaceEnv, tt.env)
			var got *Options
			cmd := NewRootCommand(func(_ context.Context, o *Options) error { got = o; return nil })
			cmd.SetArgs(append([]string{"serve"}, tt.args...))
			err := cmd.ExecuteContext(context.Background())
			if tt.wantErr != nil {
				if err == nil || (!errors.Is(tt.wantErr, errAny) && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if got != nil {
					t.Error("serve ran despite the error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := defaults
			tt.want(&want)
			if d := cmp.Diff(&want, got); d != "" {
				t.Errorf("options (-want +got):\n%s", d)
			}
		})
	}
}

var errAny = errors.New("any error")

func TestRootCommandHasCertsBootstrap(t *testing.T) {
	root := NewRootCommand(func(context.Context, *Options) error { return nil })
	cmd, args, err := root.Find([]string{"certs", "bootstrap", "--namespace", "x"})
	if err != nil {
		t.Fatalf("find certs bootstrap: %v", err)
	}
	if cmd.Name() != "bootstrap" || cmd.Parent().Name() != "certs" {
		t.Fatalf("found %q under %q, want bootstrap under certs", cmd.Name(), cmd.Parent().Name())
	}
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("parse bootstrap flags: %v", err)
	}
	if got := cmd.Flags().Lookup("namespace").Value.String(); got != "x" {
		t.Errorf("--namespace = %q, want x", got)
	}
}
