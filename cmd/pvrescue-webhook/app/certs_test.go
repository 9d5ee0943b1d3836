package app

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/certs"
)

func TestBootstrapCommandFlags(t *testing.T) {
	var got *certs.Options
	cmd := NewBootstrapCommand(func(_ context.Context, o *certs.Options) error { got = o; return nil })
	cmd.SetArgs([]string{"--namespace=ns", "--secret=s", "--service=svc", "--webhook-config=w", "--renew-before=1h", "--validity=24h", "--interval=10m"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got.Namespace != "ns" || got.Secret != "s" || got.Service != "svc" || got.WebhookConfig != "w" || got.RenewBefore != time.Hour || got.Validity != 24*time.Hour || got.Interval != 10*time.Minute {
		t.Fatalf("flags not applied: %+v", got)
	}
	cmd = NewBootstrapCommand(func(context.Context, *certs.Options) error { t.Fatal("run called with invalid options"); return nil })
	cmd.SetArgs([]string{"--renew-before=48h", "--validity=24h"})
	if err := cmd.ExecuteContext(context.Background()); err == nil {
		t.Fatal("invalid options accepted")
	}
}

func TestNewCommandHasBootstrap(t *testing.T) {
	cmd := NewCertsCommand(func() (kubernetes.Interface, error) { return nil, errors.New("no cluster") })
	sub, _, err := cmd.Find([]string{"bootstrap"})
	if err != nil || sub.Name() != "bootstrap" {
		t.Fatalf("certs bootstrap not found: %v", err)
	}
	cmd.SetArgs([]string{"bootstrap"})
	if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), "no cluster") {
		t.Fatalf("want the client error, got %v", err)
	}
}
