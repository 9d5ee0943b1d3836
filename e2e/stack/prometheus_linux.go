//go:build linux

package stack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// Prometheus is a real Prometheus server (Debian's prometheus package) scraping the cluster the way
// the chart's monitoring objects tell prometheus-operator to: the webhook pods (PodMonitor
// pvrescue-webhook), the agent pods with honor_labels and the node name as instance
// (ServiceMonitor pvrescue-agent), and the apiserver (for the fail-open counter), with the
// alert rules of monitoring/pvrescue.rules.yaml loaded.
//
// Deviations: no prometheus-operator here (no image can be pulled), so this scrape configuration
// is written by hand from what the operator generates for those objects; and Debian's Prometheus
// is built without Kubernetes service discovery, so the suite lists the pods every 2 s and writes
// their addresses into file_sd files (the operator would use kubernetes_sd).
type Prometheus struct {
	URL       string
	rulesFile string
	proc      *cluster.Process
	cancel    context.CancelFunc
	done      chan struct{}
}

// PrometheusBinary is where Debian's prometheus package installs the server.
const PrometheusBinary = "/usr/bin/prometheus"

// The job labels prometheus-operator gives the chart's objects' targets: <namespace>/<name> for a
// PodMonitor, the Service's name for a ServiceMonitor.
const (
	JobWebhook   = Namespace + "/pvrescue-webhook"
	JobAgent     = "pvrescue-agent-metrics"
	JobAPIServer = "apiserver"
)

func prometheusConfig(c *cluster.Cluster, rulesFile, sdDir string) string {
	return fmt.Sprintf(`global: {scrape_interval: 2s, evaluation_interval: 2s, scrape_timeout: 2s}
rule_files: [%q]
scrape_configs:
- job_name: %q
  file_sd_configs: [{files: [%q], refresh_interval: 2s}]
- job_name: %q
  honor_labels: true
  file_sd_configs: [{files: [%q], refresh_interval: 2s}]
- job_name: %q
  scrape_interval: 10s
  scrape_timeout: 10s
  scheme: https
  tls_config: {ca_file: %q, cert_file: %q, key_file: %q}
  static_configs: [{targets: [%q]}]
`, rulesFile, JobWebhook, filepath.Join(sdDir, "webhook.json"), JobAgent, filepath.Join(sdDir, "agent.json"), JobAPIServer,
		c.PKI.Path(cluster.CACert), c.PKI.Path(cluster.AdminCert), c.PKI.Path(cluster.AdminKey), hostPort(c.Server))
}

// targetGroup is one entry of a Prometheus file_sd file.
type targetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// writeTargets writes the metrics endpoints of the running webhook and agent pods as file_sd
// files, with the labels prometheus-operator would give them (pod; instance = node for the agent).
func writeTargets(ctx context.Context, c *cluster.Cluster, dir string) error {
	for _, w := range []struct{ name, file string }{{WebhookDep, "webhook.json"}, {AgentDS, "agent.json"}} {
		pods, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + w.name})
		if err != nil {
			return err
		}
		groups := []targetGroup{}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || p.DeletionTimestamp != nil {
				continue
			}
			labels := map[string]string{"namespace": p.Namespace, "pod": p.Name}
			if w.name == AgentDS {
				labels = map[string]string{"instance": p.Spec.NodeName}
			}
			groups = append(groups, targetGroup{Targets: []string{net.JoinHostPort(p.Status.PodIP, "8080")}, Labels: labels})
		}
		b, err := json.Marshal(groups)
		if err != nil {
			return err
		}
		tmp := filepath.Join(dir, "."+w.file)
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, w.file)); err != nil {
			return err
		}
	}
	return nil
}

func hostPort(server string) string {
	u, err := url.Parse(server)
	if err != nil {
		return server
	}
	return u.Host
}

// ErrNoPrometheus is wrapped when the prometheus binary is missing.
var ErrNoPrometheus = errors.New("prometheus not installed")

// StartPrometheus starts Prometheus on 127.0.0.1 with the rule file rules loaded and waits until it
// is ready.
func StartPrometheus(ctx context.Context, c *cluster.Cluster, rules []byte) (*Prometheus, error) {
	bin, err := exec.LookPath(PrometheusBinary)
	if err != nil {
		return nil, fmt.Errorf("%w (%w): apt-get install -y prometheus", ErrNoPrometheus, err)
	}
	dir := filepath.Join(c.Opts.WorkDir, "prometheus")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	if err := writeTargets(ctx, c, dir); err != nil {
		return nil, fmt.Errorf("write scrape targets: %w", err)
	}
	rulesFile := filepath.Join(dir, "pvrescue.rules.yaml")
	if err := os.WriteFile(rulesFile, rules, 0o644); err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(prometheusConfig(c, rulesFile, dir)), 0o644); err != nil {
		return nil, err
	}
	port, err := testenv.PickPort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	sdCtx, cancel := context.WithCancel(context.Background())
	p := &Prometheus{URL: fmt.Sprintf("http://127.0.0.1:%d", port), rulesFile: rulesFile, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-sdCtx.Done():
				return
			case <-t.C:
				_ = writeTargets(sdCtx, c, dir) // a failed pass is retried on the next tick
			}
		}
	}()
	p.proc, err = cluster.StartProcess(c.Opts.LogDir(), "prometheus", bin, []string{
		"--config.file=" + cfg, "--storage.tsdb.path=" + filepath.Join(dir, "data"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port),
		"--web.enable-lifecycle", // POST /-/reload: SetRules
	}, nil)
	if err != nil {
		p.cancel()
		return nil, err
	}
	err = c.Wait(ctx, time.Minute, "Prometheus to be ready", func(ctx context.Context) (bool, error) {
		if err := p.proc.Exited(); err != nil {
			return false, fmt.Errorf("prometheus exited: %w (log %s)", err, p.proc.Log)
		}
		resp, err := http.Get(p.URL + "/-/ready")
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close() // only the status matters
		return resp.StatusCode == http.StatusOK, fmt.Errorf("status %d", resp.StatusCode)
	})
	return p, err
}

// Stop ends the target discovery and kills the server.
func (p *Prometheus) Stop() error {
	p.cancel()
	<-p.done
	return p.proc.Kill()
}

// SetRules replaces the loaded rule file with rules and reloads Prometheus (the reload endpoint
// answers once the new rules are in place, or with the reason they were refused).
func (p *Prometheus) SetRules(ctx context.Context, rules []byte) error {
	tmp := p.rulesFile + ".new"
	if err := os.WriteFile(tmp, rules, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, p.rulesFile); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.URL+"/-/reload", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("reload Prometheus: %w", err)
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("reload Prometheus: %s: %s", resp.Status, b)
	}
	return nil
}

// Alert is one active alert as /api/v1/alerts reports it (pending or firing).
type Alert struct {
	Labels   map[string]string `json:"labels"`
	State    string            `json:"state"`
	ActiveAt time.Time         `json:"activeAt"`
}

// Alerts returns the active alerts.
func (p *Prometheus) Alerts(ctx context.Context) ([]Alert, error) {
	var res struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := p.get(ctx, "/api/v1/alerts", &res); err != nil {
		return nil, err
	}
	return res.Alerts, nil
}

// Sample is one series of an instant query result.
type Sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// Query runs an instant query and returns its vector (an error for a query Prometheus refuses).
func (p *Prometheus) Query(ctx context.Context, expr string) ([]Sample, error) {
	var res struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := p.get(ctx, "/api/v1/query?query="+url.QueryEscape(expr), &res); err != nil {
		return nil, fmt.Errorf("query %q: %w", expr, err)
	}
	switch res.ResultType {
	case "vector":
		var v []Sample
		return v, json.Unmarshal(res.Result, &v)
	case "scalar":
		return []Sample{{}}, nil
	}
	return nil, fmt.Errorf("query %q: result type %s", expr, res.ResultType)
}

// AlertRule is one loaded alerting rule as /api/v1/rules reports it.
type AlertRule struct {
	Name      string `json:"name"`
	Type      string `json:"type"`
	Health    string `json:"health"`
	LastError string `json:"lastError"`
	State     string `json:"state"`
	Query     string `json:"query"`
	// Duration is the rule's `for:` in seconds.
	Duration float64 `json:"duration"`
}

// Rules returns every loaded rule.
func (p *Prometheus) Rules(ctx context.Context) ([]AlertRule, error) {
	var res struct {
		Groups []struct {
			Rules []AlertRule `json:"rules"`
		} `json:"groups"`
	}
	if err := p.get(ctx, "/api/v1/rules", &res); err != nil {
		return nil, err
	}
	var out []AlertRule
	for _, g := range res.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

func (p *Prometheus) get(ctx context.Context, path string, data any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }() // read to the end below
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return fmt.Errorf("decode %s: %w (%s)", path, err, b)
	}
	if env.Status != "success" {
		return fmt.Errorf("prometheus: %s", env.Error)
	}
	return json.Unmarshal(env.Data, data)
}
