package app

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCommandFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     string
		args    []string
		want    *Options
		wantErr error
	}{
		{
			name: "defaults with node from env", env: "node-a",
			want: &Options{NodeName: "node-a", MetricsBindAddress: ":8080", HealthProbeBindAddress: ":8081", ContainerRemount: true},
		},
		{
			name: "all flags", env: "node-a",
			args: []string{"--config=/etc/pvrescue/config.yaml", "--node-name=node-b", "--kubeconfig=/k",
				"--metrics-bind-address=127.0.0.1:9090", "--health-probe-bind-address=0", "--container-remount=false"},
			want: &Options{ConfigFile: "/etc/pvrescue/config.yaml", NodeName: "node-b", Kubeconfig: "/k",
				MetricsBindAddress: "127.0.0.1:9090", HealthProbeBindAddress: "0"},
		},
		{name: "no node name", wantErr: ErrInvalidOptions},
		{name: "empty metrics address", env: "n", args: []string{"--metrics-bind-address="}, wantErr: ErrInvalidOptions},
		{name: "positional argument", env: "n", args: []string{"extra"}, wantErr: errAny},
		{name: "unknown flag", env: "n", args: []string{"--nope"}, wantErr: errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(NodeNameEnv, tc.env)
			var got *Options
			cmd := NewCommand(func(_ context.Context, o *Options) error { got = o; return nil })
			cmd.SetArgs(tc.args)
			err := cmd.ExecuteContext(context.Background())
			if tc.wantErr != nil {
				if err == nil || (!errors.Is(tc.wantErr, errAny) && !errors.Is(err, tc.wantErr)) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if got != nil {
					t.Fatal("run called despite invalid options")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("options (-want +got):\n%s", d)
			}
		})
	}
}

var errAny = errors.New("any error")
