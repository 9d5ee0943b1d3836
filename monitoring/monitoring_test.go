package monitoring_test

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/pvrescue/pvrescue/charts"
	"github.com/pvrescue/pvrescue/monitoring"
)

const runbookBase = "https://github.com/pvrescue/pvrescue/blob/main/docs/operations.md"

var promql = parser.NewParser(parser.Options{})

func rules(t *testing.T) *rulefmt.RuleGroups {
	t.Helper()
	b, err := monitoring.FS.ReadFile(monitoring.RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.Parse(b, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("%s is not a valid rule file: %v", monitoring.RulesFile, errs)
	}
	return rgs
}

// promtool checks the rule file and runs its unit tests (every alert fires, stays quiet before its
// threshold and resolves).
func TestPromtoolRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found in PATH: it comes with Debian's prometheus package (apt-get install -y prometheus): %v", err)
	}
	for _, args := range [][]string{{"check", "rules", monitoring.RulesFile}, {"test", "rules", monitoring.RulesTestFile}} {
		cmd := exec.Command(promtool, args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), bytes.TrimSpace(out))
	}
}

type promtoolTests struct {
	RuleFiles []string `json:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			EvalTime  string           `json:"eval_time"`
			AlertName string           `json:"alertname"`
			ExpAlerts []map[string]any `json:"exp_alerts"`
		} `json:"alert_rule_test"`
	} `json:"tests"`
}

// Every alert is actionable: it has a summary, a severity and a runbook section that exists in
// docs/operations.md, and the promtool tests show it both firing and quiet.
func TestEveryAlertIsDocumentedAndTested(t *testing.T) {
	b, err := monitoring.FS.ReadFile(monitoring.RulesTestFile)
	if err != nil {
		t.Fatal(err)
	}
	var pt promtoolTests
	// Only the fields needed here are declared (the file's schema is promtool's, checked above).
	if err := yaml.Unmarshal(b, &pt); err != nil {
		t.Fatal(err)
	}
	firing, quiet := map[string]int{}, map[string]int{}
	for _, tc := range pt.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				firing[a.AlertName]++
			} else {
				quiet[a.AlertName]++
			}
		}
	}
	docs, err := os.ReadFile(filepath.Join("..", "docs", "operations.md"))
	if err != nil {
		t.Fatalf("runbooks live in docs/operations.md: %v", err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#+ (.+)$`).FindAllStringSubmatch(string(docs), -1) {
		anchors[githubAnchor(m[1])] = true
	}
	var alerts int
	for _, g := range rules(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if r.Annotations["summary"] == "" {
				t.Errorf("%s has no summary", r.Alert)
			}
			if r.Labels["severity"] != "warning" && r.Labels["severity"] != "critical" {
				t.Errorf("%s: severity %q, want warning or critical", r.Alert, r.Labels["severity"])
			}
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookBase+"#")
			if !ok || !anchors[anchor] {
				t.Errorf("%s: runbook_url %q does not name a section of docs/operations.md", r.Alert, r.Annotations["runbook_url"])
			}
			if firing[r.Alert] == 0 || quiet[r.Alert] == 0 {
				t.Errorf("%s: promtool tests show it firing %d and quiet %d times; want both", r.Alert, firing[r.Alert], quiet[r.Alert])
			}
		}
	}
	if alerts < 6 {
		t.Errorf("only %d alerts", alerts)
	}
}

// githubAnchor is the fragment GitHub gives a Markdown heading.
func githubAnchor(heading string) string {
	h := strings.ToLower(strings.TrimSpace(heading))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9'):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestAlertsUseKnownMetrics(t *testing.T) {
	for _, g := range rules(t).Groups {
		for _, r := range g.Rules {
			names, err := monitoring.MetricNames(r.Expr)
			if err != nil {
				t.Errorf("%s: %v", r.Alert, err)
			}
			for _, n := range names {
				if !monitoring.Known(n) {
					t.Errorf("%s uses %s, not in monitoring.KnownMetrics (METRICS.md)", r.Alert, n)
				}
			}
		}
	}
}

func TestKnownMetricNamesFollowConventions(t *testing.T) {
	for name, typ := range monitoring.KnownMetrics {
		switch {
		case typ == "counter" && !strings.HasSuffix(name, "_total") && !strings.HasSuffix(name, "_count"):
			t.Errorf("counter %s lacks _total", name)
		case typ != "counter" && strings.HasSuffix(name, "_total"):
			t.Errorf("%s %s ends in _total", typ, name)
		case strings.Contains(name, "timestamp") && !strings.HasSuffix(name, "_timestamp_seconds"):
			t.Errorf("%s: timestamps are _timestamp_seconds", name)
		case strings.Contains(name, "duration") && !strings.HasSuffix(name, "_seconds"):
			t.Errorf("%s: durations are in seconds", name)
		}
	}
}

// Every dashboard panel has a title and a query per target that parses and uses known metrics only.
func TestDashboard(t *testing.T) {
	d, err := monitoring.LoadDashboard()
	if err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard needs uid and title")
	}
	ids := map[int]bool{}
	var queries int
	var walk func([]monitoring.Panel)
	walk = func(ps []monitoring.Panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Title == "" {
				t.Errorf("panel %d has no title", p.ID)
			}
			if p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q is wider than the grid", p.Title)
			}
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q must use the ${datasource} variable", p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				queries++
				names, err := monitoring.MetricNames(monitoring.ExpandGrafanaVars(tg.Expr))
				if err != nil {
					t.Errorf("panel %q: %q: %v", p.Title, tg.Expr, err)
				}
				if len(names) == 0 {
					t.Errorf("panel %q: %q selects no metric", p.Title, tg.Expr)
				}
				for _, n := range names {
					if !monitoring.Known(n) {
						t.Errorf("panel %q uses %s, not in monitoring.KnownMetrics", p.Title, n)
					}
				}
			}
		}
	}
	walk(d.Panels)
	if queries < 10 {
		t.Errorf("only %d queries", queries)
	}
	t.Logf("%d panels, %d queries parsed", len(ids), queries)
}

// The chart ships byte-identical copies of the rule file and the dashboard.
func TestChartCopiesAreCurrent(t *testing.T) {
	for _, f := range []string{monitoring.RulesFile, monitoring.DashboardFile} {
		want, err := monitoring.FS.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := charts.FS.ReadFile(charts.ChartDir + "/files/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want, got) {
			t.Errorf("charts/pvrescue/files/%s differs from monitoring/%s: cp monitoring/%s charts/pvrescue/files/", f, f, f)
		}
	}
}

func decodeStrict(t *testing.T, o *unstructured.Unstructured, out any) {
	t.Helper()
	b, err := yaml.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, out); err != nil {
		t.Fatalf("%s %s does not decode strictly into prometheus-operator's types: %v", o.GetKind(), o.GetName(), err)
	}
}

// The chart's monitoring objects, decoded strictly with prometheus-operator's Go types, wire up:
// the ServiceMonitor selects the agent metrics Service, which selects the agent pods' metrics port;
// the PodMonitor selects the webhook pods' metrics port; the PrometheusRule holds the rule file's
// groups with the runbook base replaced; and nothing of it is rendered when monitoring is off.
func TestChartMonitoringObjects(t *testing.T) {
	ch, err := charts.Load()
	if err != nil {
		t.Fatal(err)
	}
	off, err := charts.Render(ch, nil, charts.DefaultRelease())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range off {
		if o.GetAPIVersion() == monitoringv1.SchemeGroupVersion.String() || o.GetName() == "pvrescue-agent-metrics" || o.GetName() == "pvrescue-dashboard" {
			t.Errorf("monitoring.enabled=false renders %s %s", o.GetKind(), o.GetName())
		}
	}
	objs, err := charts.Render(ch, map[string]any{"monitoring": map[string]any{
		"enabled": true, "labels": map[string]any{"release": "prom"}, "runbookBaseURL": "https://wiki.example/pvrescue",
	}}, charts.DefaultRelease())
	if err != nil {
		t.Fatal(err)
	}
	var (
		sm  monitoringv1.ServiceMonitor
		pm  monitoringv1.PodMonitor
		pr  monitoringv1.PrometheusRule
		svc corev1.Service
		ds  appsv1.DaemonSet
		dep appsv1.Deployment
		cm  corev1.ConfigMap
	)
	targets := map[string]any{"ServiceMonitor/pvrescue-agent": &sm, "PodMonitor/pvrescue-webhook": &pm, "PrometheusRule/pvrescue": &pr,
		"Service/pvrescue-agent-metrics": &svc, "DaemonSet/pvrescue-agent": &ds, "Deployment/pvrescue-webhook": &dep, "ConfigMap/pvrescue-dashboard": &cm}
	for _, o := range objs {
		if out, ok := targets[o.GetKind()+"/"+o.GetName()]; ok {
			decodeStrict(t, o, out)
			delete(targets, o.GetKind()+"/"+o.GetName())
		}
	}
	if len(targets) > 0 {
		t.Fatalf("not rendered: %v", targets)
	}
	for _, m := range []map[string]string{sm.Labels, pm.Labels, pr.Labels} {
		if m["release"] != "prom" {
			t.Errorf("monitoring.labels not applied: %v", m)
		}
	}

	containerPorts := func(ps corev1.PodSpec) map[string]bool {
		m := map[string]bool{}
		for _, p := range ps.Containers[0].Ports {
			m[p.Name] = true
		}
		return m
	}
	sel, err := labels.ValidatedSelectorFromSet(sm.Spec.Selector.MatchLabels)
	if err != nil {
		t.Fatal(err)
	}
	if !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor selector %v does not select Service labels %v", sm.Spec.Selector.MatchLabels, svc.Labels)
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(ds.Spec.Template.Labels)) {
		t.Errorf("agent metrics Service does not select the agent pods")
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || !containerPorts(ds.Spec.Template.Spec)[svc.Spec.Ports[0].TargetPort.String()] {
		t.Errorf("agent scrape port does not lead to the agent's metrics port")
	}
	if hl := sm.Spec.Endpoints[0].HonorLabels; !hl {
		t.Errorf("agent series carry their own namespace/pod labels: honorLabels must be true")
	}
	if !labels.SelectorFromSet(pm.Spec.Selector.MatchLabels).Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("PodMonitor does not select the webhook pods")
	}
	if len(pm.Spec.PodMetricsEndpoints) != 1 || pm.Spec.PodMetricsEndpoints[0].Port == nil || !containerPorts(dep.Spec.Template.Spec)[*pm.Spec.PodMetricsEndpoints[0].Port] {
		t.Errorf("PodMonitor port does not name the webhook's metrics port")
	}

	want := rules(t)
	if len(pr.Spec.Groups) != len(want.Groups) {
		t.Fatalf("PrometheusRule has %d groups, rule file %d", len(pr.Spec.Groups), len(want.Groups))
	}
	for i, g := range want.Groups {
		got := pr.Spec.Groups[i]
		if got.Name != g.Name || len(got.Rules) != len(g.Rules) {
			t.Errorf("group %d: %s with %d rules, want %s with %d", i, got.Name, len(got.Rules), g.Name, len(g.Rules))
			continue
		}
		for j, r := range g.Rules {
			gr := got.Rules[j]
			if gr.Alert != r.Alert || gr.Expr.String() != r.Expr {
				t.Errorf("rule %s differs: %q vs %q", r.Alert, gr.Expr.String(), r.Expr)
			}
			wantURL := strings.Replace(r.Annotations["runbook_url"], runbookBase, "https://wiki.example/pvrescue", 1)
			if d := cmp.Diff(wantURL, gr.Annotations["runbook_url"]); d != "" {
				t.Errorf("%s runbook_url (-want +got):\n%s", r.Alert, d)
			}
		}
	}
	dash, err := monitoring.FS.ReadFile(monitoring.DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["pvrescue.json"] != strings.TrimRight(string(dash), "\n") || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap does not carry dashboard.json with the sidecar label")
	}
}
