//go:build e2e

package scenarios

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/cmd/kubectl-pvrescue/app"
	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/monitoring"
)

// TestHelm installs pvrescue as the README says with the Helm 4 CLI (readmeInstall: the README's
// install commands as written, images built by `make images` and pushed by `make push` to a
// registry on the node, which the node pulls from), with the flag the README gives for a cluster
// without cert-manager (tls.mode=bootstrap: the chart's bootstrap Job issues the certificate).
// Then an in-place `helm upgrade` (Helm's Go SDK, the CLI's code) changes values (webhook timeout
// and resources: the webhook Deployment rolls) while pods are being admitted continuously. Every
// admission during the roll must be mutated (zero failed admissions: failurePolicy Ignore would
// hide a failure, so an unmutated pod counts as one), and the serving CA, the caBundle and the
// serving certificate must be the same after the upgrade. A real Prometheus scrapes the webhook,
// the agent and the apiserver throughout, with the alert rules loaded: every target is up, every
// rule evaluates, no alert fires on the healthy install, and every dashboard query runs (those over
// always-exported metrics return series). Then `kubectl pvrescue status` runs against the cluster.
// Then both rescues run on the upgraded install (a lost local disk: the pod starts on a fake; a lost
// FUSE mount restored), and last a local disk and an S3 mount are lost and brought back, and the
// lost-disk and lost-mount alerts fire and resolve (alertsOnFailures).
func TestHelm(t *testing.T) {
	c := framework.UpWith(t, "helm", func(o *cluster.Options) { o.PullRegistry = true })
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	e := rescueEnv(ctx, t, c)
	readme, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	noCertManager, err := stack.ReadmeBootstrapFlag(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	img := readmeInstall(ctx, t, e, 4, "e2e-helm", strings.Fields(noCertManager), "")
	t.Logf("installed from the README with Helm 4 in %s", time.Since(start).Round(100*time.Millisecond))
	h, err := stack.AttachHelm(c, img)
	if err != nil {
		t.Fatalf("prepare the helm upgrade: %v", err)
	}
	cs := c.Client
	rules, err := monitoring.FS.ReadFile(monitoring.RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	prom, err := stack.StartPrometheus(ctx, c, rules)
	if prom != nil {
		t.Cleanup(func() { _ = prom.Stop() })
	}
	if err != nil {
		t.Fatalf("start Prometheus: %v", err)
	}

	before := tlsState(ctx, t, c.Client)
	if len(before.caBundle) == 0 {
		t.Fatalf("the bootstrap Job set no caBundle")
	}

	// The load: workers admit pods (server dry-run: through the webhook, nothing stored).
	var total, failed atomic.Int64
	var firstFailure atomic.Value
	admit := func(i int) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("load-%d", i)},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr(false),
				Containers: []corev1.Container{{Name: "app", Image: c.BusyboxImage, Command: []string{"sleep", "1"},
					VolumeMounts: []corev1.VolumeMount{{Name: "bucket", MountPath: "/data"}}}},
				Volumes: []corev1.Volume{{Name: "bucket", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{
					Driver: "ru.yandex.s3.csi", VolumeAttributes: map[string]string{"bucket": "b"}}}}},
			},
		}
		reqCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		got, err := cs.CoreV1().Pods("e2e-helm").Create(reqCtx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		total.Add(1)
		switch {
		case err != nil:
			failed.Add(1)
			firstFailure.CompareAndSwap(nil, err.Error())
		case got.Annotations[contract.AnnotationStatus] == "":
			failed.Add(1)
			firstFailure.CompareAndSwap(nil, "pod admitted without mutation (webhook not called or failed: failurePolicy Ignore)")
		}
	}
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var seq atomic.Int64
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for loadCtx.Err() == nil {
				admit(int(seq.Add(1)))
			}
		}()
	}
	stop := func() { stopLoad(); wg.Wait() }
	defer stop()
	waitFor(t, time.Minute, "50 admissions before the upgrade", func() (bool, string) {
		return total.Load() >= 50, fmt.Sprintf("%d admissions, %d failed", total.Load(), failed.Load())
	})
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d admissions failed before the upgrade: %v", n, total.Load(), firstFailure.Load())
	}
	oldPods := podNames(ctx, t, c.Client)

	upStart := time.Now()
	atUpgrade := total.Load()
	if err := h.Upgrade(ctx, map[string]any{
		"tls":     map[string]any{"mode": "bootstrap"},
		"webhook": map[string]any{"timeoutSeconds": 10, "resources": map[string]any{"requests": map[string]any{"cpu": "60m"}}},
	}); err != nil {
		t.Fatalf("%v", err)
	}
	upgradeTook := time.Since(upStart)
	// Keep admitting a little after the roll, then stop.
	target := total.Load() + 50
	waitFor(t, time.Minute, "50 admissions after the upgrade", func() (bool, string) {
		return total.Load() >= target, fmt.Sprintf("%d admissions", total.Load())
	})
	stop()

	during := total.Load() - atUpgrade
	t.Logf("helm upgrade under load: %d admissions in all, %d during/after the upgrade (%s), %d failed",
		total.Load(), during, upgradeTook.Round(100*time.Millisecond), failed.Load())
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d admissions failed across the upgrade; first: %v", n, total.Load(), firstFailure.Load())
	}

	// The value change took effect, and the webhook pods were replaced.
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "pvrescue-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := mwc.Webhooks[0].TimeoutSeconds; got == nil || *got != 10 {
		t.Errorf("timeoutSeconds after upgrade = %v, want 10", got)
	}
	for p := range podNames(ctx, t, c.Client) {
		if oldPods[p] {
			t.Errorf("webhook pod %s survived the upgrade: the Deployment did not roll", p)
		}
	}

	// Same CA, same caBundle, same serving certificate.
	after := tlsState(ctx, t, c.Client)
	if !bytes.Equal(before.caBundle, after.caBundle) {
		t.Errorf("caBundle changed across helm upgrade")
	}
	if !bytes.Equal(before.caCert, after.caCert) {
		t.Errorf("CA certificate (Secret pvrescue-ca) changed across helm upgrade")
	}
	if !bytes.Equal(before.servingCert, after.servingCert) {
		t.Errorf("serving certificate (Secret pvrescue-webhook-tls) changed across helm upgrade")
	}

	checkPrometheus(ctx, t, prom)

	// kubectl pvrescue against this cluster: the config and webhook configuration the chart
	// installed are found, the node is listed, and no pod is unprotected.
	var out, errOut bytes.Buffer
	o := app.NewOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	cmd := app.NewCommand(o)
	cmd.SetArgs([]string{"--kubeconfig", c.Kubeconfig, "status", "-o", "json"})
	if err := cmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("kubectl pvrescue status: %v\n%s", err, errOut.String())
	}
	var r app.StatusReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Nodes) != 1 || r.Nodes[0].Name != c.Opts.NodeName || len(r.Notes) != 0 || len(r.Unprotected) != 0 {
		t.Errorf("kubectl pvrescue status on the chart install: %s", out.String())
	}

	installRescues(t, e)
	alertsOnFailures(ctx, t, e, prom, rules)
}

type tlsSnapshot struct{ caBundle, caCert, servingCert []byte }

// tlsState reads the caBundle the apiserver trusts and the two Secrets of the bootstrap.
func tlsState(ctx context.Context, t *testing.T, cs kubernetes.Interface) tlsSnapshot {
	t.Helper()
	mwc, err := cs.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "pvrescue-webhook", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := cs.CoreV1().Secrets(stack.Namespace).Get(ctx, "pvrescue-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret pvrescue-ca (made by the chart's bootstrap Job): %v", err)
	}
	serving, err := cs.CoreV1().Secrets(stack.Namespace).Get(ctx, "pvrescue-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret pvrescue-webhook-tls (made by the chart's bootstrap Job): %v", err)
	}
	return tlsSnapshot{caBundle: mwc.Webhooks[0].ClientConfig.CABundle, caCert: ca.Data["tls.crt"], servingCert: serving.Data["tls.crt"]}
}

// podNames are the webhook's pods now, terminating ones left out.
func podNames(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string]bool {
	t.Helper()
	pods, err := cs.CoreV1().Pods(stack.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + stack.WebhookDep})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil { // old pods may still be terminating after a roll
			m[p.Name] = true
		}
	}
	return m
}

// alwaysExported are the metrics every healthy install exports from the start (registered without
// labels, or observed by the admissions of this test).
var alwaysExported = map[string]bool{
	"up": true, "pvrescue_webhook_admissions_total": true, "pvrescue_webhook_admission_duration_seconds_bucket": true,
	"pvrescue_localdisk_fake_devices_active": true,
}

func checkPrometheus(ctx context.Context, t *testing.T, prom *stack.Prometheus) {
	t.Helper()
	for _, tc := range []struct {
		expr string
		want int
	}{
		{fmt.Sprintf(`up{job=%q} == 1`, stack.JobWebhook), 2},
		{fmt.Sprintf(`up{job=%q} == 1`, stack.JobAgent), 1},
		{fmt.Sprintf(`up{job=%q} == 1`, stack.JobAPIServer), 1},
		{`sum(pvrescue_webhook_admissions_total{result="injected"}) > 0`, 1},
	} {
		waitFor(t, time.Minute, tc.expr, func() (bool, string) {
			v, err := prom.Query(ctx, tc.expr)
			if err != nil {
				return false, err.Error()
			}
			return len(v) == tc.want, fmt.Sprintf("%d series, want %d: %v", len(v), tc.want, v)
		})
	}
	var alerts int
	waitFor(t, time.Minute, "every alert rule evaluated without error", func() (bool, string) {
		rules, err := prom.Rules(ctx)
		if err != nil {
			return false, err.Error()
		}
		alerts = 0
		for _, r := range rules {
			if r.Type != "alerting" {
				continue
			}
			alerts++
			if r.Health != "ok" {
				return false, fmt.Sprintf("rule %s health %q %s", r.Name, r.Health, r.LastError)
			}
		}
		return alerts >= 11, fmt.Sprintf("%d alerting rules loaded", alerts)
	})
	firing, err := prom.Query(ctx, `ALERTS{alertstate="firing"}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(firing) > 0 {
		t.Errorf("alerts fire on a healthy install: %v", firing)
	}
	d, err := monitoring.LoadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	var withSeries, queries int
	for _, q := range d.Queries() {
		queries++
		expr := monitoring.ExpandGrafanaVars(q.Expr)
		names, err := monitoring.MetricNames(expr)
		if err != nil {
			t.Fatal(err)
		}
		required := true
		for _, n := range names {
			required = required && alwaysExported[n]
		}
		// A rate needs two scrapes of a series: give new targets a few scrape intervals.
		timeout := time.Second
		if required {
			timeout = 30 * time.Second
		}
		var last []stack.Sample
		deadline := time.Now().Add(timeout)
		for {
			v, err := prom.Query(ctx, expr)
			if err != nil {
				t.Errorf("dashboard panel %q: %v", q.Panel, err)
				break
			}
			last = v
			if len(v) > 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Second)
		}
		if len(last) > 0 {
			withSeries++
		} else if required {
			t.Errorf("dashboard panel %q returns no series: %s", q.Panel, expr)
		}
	}
	t.Logf("Prometheus: webhook (2 pods), agent and apiserver up; %d alert rules evaluated, none firing; %d dashboard queries ran, %d returned series (the rest need a failure, or metrics other branches add)",
		alerts, queries, withSeries)
}
