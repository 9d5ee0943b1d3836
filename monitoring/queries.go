package monitoring

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/prometheus/prometheus/promql/parser"
)

var promql = parser.NewParser(parser.Options{})

// MetricNames parses a PromQL expression and returns the metric name of every selector in it; a
// selector without a metric name is an error (it would match any metric).
func MetricNames(expr string) ([]string, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var selErr error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		if vs.Name == "" {
			selErr = fmt.Errorf("selector %s names no metric", vs)
			return nil
		}
		names = append(names, vs.Name)
		return nil
	})
	return names, selErr
}

// GrafanaVars are Grafana's own range variables; ExpandGrafanaVars replaces them by a duration, as
// Grafana does before it sends a query.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "15s", "$__range", "1h")

// ExpandGrafanaVars replaces Grafana's range variables in a panel query.
func ExpandGrafanaVars(expr string) string { return grafanaVars.Replace(expr) }

// Panel is one dashboard panel (rows hold nested panels).
type Panel struct {
	ID         int     `json:"id"`
	Type       string  `json:"type"`
	Title      string  `json:"title"`
	Panels     []Panel `json:"panels"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ H, W, X, Y int } `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// Dashboard is the part of dashboard.json the tests read.
type Dashboard struct {
	UID    string  `json:"uid"`
	Title  string  `json:"title"`
	Panels []Panel `json:"panels"`
}

// Query is one panel query.
type Query struct {
	Panel string
	Expr  string
}

// LoadDashboard decodes dashboard.json.
func LoadDashboard() (*Dashboard, error) {
	b, err := FS.ReadFile(DashboardFile)
	if err != nil {
		return nil, err
	}
	var d Dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", DashboardFile, err)
	}
	return &d, nil
}

// Queries lists every panel query of the dashboard, rows included, in order.
func (d *Dashboard) Queries() []Query {
	var out []Query
	var walk func([]Panel)
	walk = func(ps []Panel) {
		for _, p := range ps {
			for _, t := range p.Targets {
				out = append(out, Query{Panel: p.Title, Expr: t.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}
