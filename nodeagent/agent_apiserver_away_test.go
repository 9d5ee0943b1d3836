package nodeagent

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// Wired as the agent command wires it, against an API server that is not there (a closed
// port): /healthz and /metrics answer, the metrics say the API server is away and for how long,
// and the rescue waits for the informers instead of running on an empty pod list.
func TestAgentWithAPIServerAway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()

	reg := prometheus.NewRegistry()
	var cos KubeContactOS
	contact := NewAPIContact(clock.RealClock{}, &cos, reg, APIContactOptions{ProbeInterval: 100 * time.Millisecond})
	rc := &rest.Config{Host: "http://" + closed, Timeout: time.Second}
	rc.Wrap(contact.WrapTransport)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cos = KubeContactOS{NodeName: "n1", Nodes: client.CoreV1().Nodes(), Prober: func(ctx context.Context) error {
		_, err := client.Discovery().RESTClient().Get().AbsPath("/version").DoRaw(ctx)
		return err
	}}
	view, err := NewKubeView(client, "n1", nil, ViewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	defer cancel()
	view.StartInformers(ctx)
	defer view.Shutdown()

	var started atomic.Bool
	health := testenv.Addr("127.0.0.1", testenv.FreePort(t))
	metricsAddr := testenv.Addr("127.0.0.1", testenv.FreePort(t))
	a := New(Options{HealthAddr: health, MetricsAddr: metricsAddr}, reg)
	a.Add("apiserver-contact", contact)
	a.Add("localdisk", AfterSync(view, RunnableFunc(func(ctx context.Context) error {
		started.Store(true)
		<-ctx.Done()
		return nil
	})))
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	get := func(url string) (string, error) {
		resp, err := http.Get(url)
		if err != nil {
			return "", err
		}
		defer func() { _ = resp.Body.Close() }() // read to the end below
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", errors.New(resp.Status)
		}
		return string(b), nil
	}
	testenv.WaitFor(t, 10*time.Second, "/healthz ok with the API server away", func() error {
		_, err := get("http://" + health + "/healthz")
		return err
	})
	testenv.WaitFor(t, 10*time.Second, "the metrics to say the API server is away", func() error {
		body, err := get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		if !strings.Contains(body, "pvrescue_agent_apiserver_reachable 0") {
			return errors.New("reachable is not 0 yet")
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if d := contact.Unreachable(); d <= 0 {
		t.Fatalf("Unreachable() = %v while away", d)
	}
	if started.Load() {
		t.Fatal("the rescue started although the informers never listed the node's pods")
	}
	if view.HasSynced() {
		t.Fatal("view synced against a closed port")
	}
	if h := a.RunnableHealth(); h["localdisk"] != nil || h["apiserver-contact"] != nil {
		t.Fatalf("RunnableHealth = %v: nothing should fail for an absent API server", h)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
