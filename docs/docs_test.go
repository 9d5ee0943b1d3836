// Package docs holds the test that keeps the documentation true: every metric, Event reason,
// Node condition and configuration key that the operator-facing docs name exists in the code,
// and every one the code defines is documented.
//
// The code's sources of truth:
//   - metrics: every prometheus.{Counter,Gauge,Histogram,Summary}Opts literal in the module's
//     non-test Go files (go/ast), cross-checked against the names the packages' own NewMetrics
//     constructors register;
//   - Event reasons and Node conditions: the Reason* and Condition* constants of
//     internal/contract, and the restore-failure details of s3mount.Reason (the word that begins a
//     MountRestoreFailed Event and the reason label of pvrescue_s3_restore_failures_total);
//   - configuration keys: configref.Keys (the json tags of internal/config), and YAML examples
//     of the file decoded strictly by config.Parse.
package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/config/configref"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/fusewatch"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/webhook"
)

const root = ".."

// docFile is one document the check reads.
type docFile struct {
	path string // relative to the repository root
	text string
}

// operatorDocs are the documents whose names must exist in the code.
func operatorDocs(t *testing.T) []docFile {
	t.Helper()
	paths := []string{"README.md", "ARCHITECTURE.md", "charts/pvrescue/README.md", "charts/pvrescue/values.yaml",
		"manifests/README.md", "manifests/RBAC.md", "webhook/README.md"}
	for _, pattern := range []string{"monitoring/*.yaml", "charts/pvrescue/files/*.yaml"} {
		m, err := filepath.Glob(filepath.Join(root, pattern))
		if err != nil || len(m) == 0 {
			t.Fatalf("no %s: %v", pattern, err)
		}
		for _, p := range m {
			paths = append(paths, mustRel(t, p))
		}
	}
	paths = append(paths, docsDir(t)...)
	return readDocs(t, paths)
}

// documentation is where every name the code defines must be explained: README and docs/.
func documentation(t *testing.T) []docFile {
	t.Helper()
	return readDocs(t, append([]string{"README.md"}, docsDir(t)...))
}

func docsDir(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, mustRel(t, p))
		}
		return err
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("docs/*.md: %v (%d files)", err, len(out))
	}
	return out
}

func mustRel(t *testing.T, p string) string {
	t.Helper()
	r, err := filepath.Rel(root, p)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.ToSlash(r)
}

func readDocs(t *testing.T, paths []string) []docFile {
	t.Helper()
	var out []docFile
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, docFile{path: p, text: string(b)})
	}
	return out
}

// lineOf is the 1-based line of offset off in text.
func lineOf(text string, off int) int { return strings.Count(text[:off], "\n") + 1 }

// ---- the code's names ----

// codeMetrics reads every metric the module's non-test Go code declares, with its type.
func codeMetrics(t *testing.T) map[string]string {
	t.Helper()
	kinds := map[string]string{"CounterOpts": "counter", "GaugeOpts": "gauge", "HistogramOpts": "histogram", "SummaryOpts": "summary"}
	out := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// e2e/ is its own module (test harness); bin/, testdata and hidden directories (e2e/.work,
			// .demo: run state) hold no product code.
			if n := d.Name(); n == "e2e" || n == "bin" || n == "testdata" || (n != ".." && strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && isIdent(sel.X, "prometheus") && sel.Sel.Name == "NewDesc" {
					t.Errorf("%s: prometheus.NewDesc: this check reads metric names from *Opts literals only; teach it NewDesc", fset.Position(n.Pos()))
				}
			case *ast.CompositeLit:
				sel, ok := n.Type.(*ast.SelectorExpr)
				if !ok || !isIdent(sel.X, "prometheus") || kinds[sel.Sel.Name] == "" {
					return true
				}
				name := ""
				for _, e := range n.Elts {
					kv, ok := e.(*ast.KeyValueExpr)
					if !ok {
						continue
					}
					key, _ := kv.Key.(*ast.Ident)
					switch {
					case key == nil:
					case key.Name == "Namespace" || key.Name == "Subsystem":
						t.Errorf("%s: %s set: this check reads the whole name from Name; teach it %s", fset.Position(kv.Pos()), key.Name, key.Name)
					case key.Name == "Name":
						lit, ok := kv.Value.(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							t.Errorf("%s: a metric Name that is not a string literal: this check cannot read it", fset.Position(kv.Pos()))
							continue
						}
						name, _ = strconv.Unquote(lit.Value)
					}
				}
				if name == "" {
					t.Errorf("%s: prometheus.%s without a Name", fset.Position(n.Pos()), sel.Sel.Name)
					return true
				}
				out[name] = kinds[sel.Sel.Name]
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found only %d metrics in the code: %v", len(out), out)
	}
	return out
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// recorder is a Registerer that keeps the names of the metrics registered on it, with their
// label names.
type recorder struct{ names map[string]string }

var (
	fqNameRe = regexp.MustCompile(`fqName: "([^"]+)"`)
	labelsRe = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

func (r *recorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqNameRe.FindStringSubmatch(d.String()); m != nil {
			labels := ""
			if l := labelsRe.FindStringSubmatch(d.String()); l != nil {
				labels = l[1]
			}
			r.names[m[1]] = labels
		}
	}
	return nil
}

func (r *recorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c) // never fails
	}
}

func (r *recorder) Unregister(prometheus.Collector) bool { return true }

// The metrics the packages register are among those read from the source (the reading misses
// none of the shapes they use), and docs/operations.md's table gives their labels.
func TestCodeMetricsMatchRegistered(t *testing.T) {
	fromSource := codeMetrics(t)
	rec := &recorder{names: map[string]string{}}
	for name, err := range map[string]error{
		"webhook":        second(webhook.NewMetrics(rec)),
		"localdisk":      second(localdisk.NewMetrics(rec)),
		"s3mount":        second(s3mount.NewMetrics(rec)),
		"containermount": second(containermount.NewMetrics(rec)),
		"mountreplace":   second(mountreplace.NewMetrics(rec)),
		"fusewatch":      second(fusewatch.New(fusewatch.NewOS(fusewatch.OSOptions{}), fusewatch.Options{Registerer: rec})),
	} {
		if err != nil {
			t.Fatalf("%s metrics: %v", name, err)
		}
	}
	_ = nodeagent.NewAPIContact(nil, nil, rec, nodeagent.APIContactOptions{})
	if len(rec.names) < 20 {
		t.Fatalf("registered only %v", rec.names)
	}
	for n := range rec.names {
		if fromSource[n] == "" {
			t.Errorf("metric %s is registered but not found in the source: fix codeMetrics", n)
		}
	}
	rows := metricsTable(t)
	for n, labels := range rec.names {
		row, ok := rows[n]
		if !ok {
			t.Errorf("docs/operations.md: no row for metric %s in the metrics table", n)
			continue
		}
		want := "—"
		if labels != "" {
			want = "`" + strings.Join(strings.Split(labels, ","), "`, `") + "`"
		}
		if row.labels != want {
			t.Errorf("docs/operations.md: metric %s has labels %s, the table says %s", n, want, row.labels)
		}
	}
}

type metricRow struct{ kind, labels string }

// metricsTable reads the rows of docs/operations.md's metrics table.
func metricsTable(t *testing.T) map[string]metricRow {
	t.Helper()
	ops := readDocs(t, []string{"docs/operations.md"})[0].text
	row := regexp.MustCompile("(?m)^\\| `(pvrescue_[a-z0-9_]+)` \\| ([a-z]+) \\| ([^|]+) \\|")
	out := map[string]metricRow{}
	for _, m := range row.FindAllStringSubmatch(ops, -1) {
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/operations.md: metric %s has two rows", m[1])
		}
		out[m[1]] = metricRow{kind: m[2], labels: strings.TrimSpace(m[3])}
	}
	if len(out) == 0 {
		t.Fatal("docs/operations.md has no metrics table (| `pvrescue_…` | type | labels | what |)")
	}
	return out
}

func second[T any](_ T, err error) error { return err }

// contractNames reads the string constants of internal/contract whose names begin with prefix,
// by value.
func contractNames(t *testing.T, prefix string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, v := range stringConsts(t, filepath.Join(root, "internal", "contract"), prefix) {
		out[v] = true
	}
	if len(out) == 0 {
		t.Fatalf("no %s* constants in internal/contract", prefix)
	}
	return out
}

func stringConsts(t *testing.T, dir, prefix string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var out []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, prefix) || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						out = append(out, v)
					}
				}
			}
		}
	}
	return out
}

// restoreDetails are the words s3mount.Reason gives a restore error (read from its source).
func restoreDetails(t *testing.T) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "nodeagent", "s3mount", "reason.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != "Reason" {
			continue
		}
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				v, _ := strconv.Unquote(lit.Value)
				out[v] = true
			}
			return true
		})
	}
	if len(out) < 5 {
		t.Fatalf("s3mount.Reason: found only %v", out)
	}
	return out
}

// Event reasons are written through internal/contract only: no literal reason at an Event call.
func TestEventReasonsComeFromContract(t *testing.T) {
	fset := token.NewFileSet()
	n := 0
	for _, dir := range []string{"nodeagent", "webhook", "cmd", "certs"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, p, nil, 0)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(nd ast.Node) bool {
				call, ok := nd.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || (sel.Sel.Name != "Event" && sel.Sel.Name != "Eventf") || len(call.Args) < 3 {
					return true
				}
				n++
				if lit, ok := call.Args[2].(*ast.BasicLit); ok {
					t.Errorf("%s: Event reason %s is a literal: add it to internal/contract (and document it)", fset.Position(lit.Pos()), lit.Value)
				}
				return true
			})
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	if n < 10 {
		t.Fatalf("found only %d Event calls", n)
	}
}

// ---- names in the docs ----

var (
	// pvrescue_x, pvrescue_x_*, pvrescue_x_{a,b} and pvrescue_x{label,…}.
	metricRe = regexp.MustCompile(`pvrescue_[a-z0-9_]*(\{[a-z0-9_,]+\}[a-z0-9_]*)?\*?`)
	// A CamelCase word of two or more humps in backticks (a trailing ":" or "*" allowed).
	backtickedRe = regexp.MustCompile("`([A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+)([:*]?)`")
	// A word named as an Event reason or a condition by the words around it.
	eventCtxRe = regexp.MustCompile("\\b(?:Events?|reason) `?([A-Z][A-Za-z0-9]+\\*?)|\\b([A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+)`? Events?\\b")
	condCtxRe  = regexp.MustCompile("\\b[Cc]onditions? `?([A-Z][A-Za-z0-9]+)|\\b([A-Z][a-z0-9]+(?:[A-Z][A-Za-z0-9]*)+)`? condition\\b")
	// A configuration key: localBlock.x, s3.x.y, helper.x (config. before it in the chart's values).
	configKeyRe = regexp.MustCompile(`(?:^|[^\w.\-/])(?:config\.)?((?:localBlock|s3|helper)(?:\.[A-Za-z<>][\w<>]*)+)`)
)

// notPvrescueNames are CamelCase words the docs use in backticks that are Kubernetes' or CSI's,
// not pvrescue's.
var notPvrescueNames = map[string]bool{
	"HostToContainer": true, "ContainerCreating": true, "RuntimeDefault": true, "IfNotPresent": true,
	"NodeStageVolume": true, "NodePublishVolume": true, "ImagePullBackOff": true, "FailedCreate": true,
}

// goIdentifiers are the names declared anywhere in the repository's Go code (both modules, tests
// included): a doc may name a Go type, function or test.
func goIdentifiers(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// bin/ and hidden directories (.git, e2e/.work, .demo: run state) hold no source.
		if n := d.Name(); d.IsDir() && (n == "bin" || (n != ".." && strings.HasPrefix(n, "."))) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				out[n.Name.Name] = true
			case *ast.TypeSpec:
				out[n.Name.Name] = true
			case *ast.ValueSpec:
				for _, id := range n.Names {
					out[id.Name] = true
				}
			case *ast.Field:
				for _, id := range n.Names {
					out[id.Name] = true
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// expandMetric turns a metric mention into names (brace lists expanded) and whether it is a
// prefix (ends with *).
func expandMetric(m string) ([]string, bool) {
	prefix := strings.HasSuffix(m, "*")
	m = strings.TrimSuffix(m, "*")
	open, end := strings.Index(m, "{"), strings.Index(m, "}")
	if open < 0 || end < open {
		return []string{m}, prefix
	}
	if !strings.HasSuffix(m[:open], "_") {
		return []string{m[:open]}, prefix // name{labels}
	}
	var out []string
	for _, alt := range strings.Split(m[open+1:end], ",") {
		out = append(out, m[:open]+alt+m[end+1:])
	}
	return out, prefix
}

// metricExists: name is a metric, or a series of a histogram/summary.
func metricExists(metrics map[string]string, name string) bool {
	if metrics[name] != "" {
		return true
	}
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, s); ok && (metrics[base] == "histogram" || metrics[base] == "summary") {
			return true
		}
	}
	return false
}

func TestDocumentedNamesExist(t *testing.T) {
	metrics := codeMetrics(t)
	reasons := contractNames(t, "Reason")
	conds := contractNames(t, "Condition")
	details := restoreDetails(t)
	idents := goIdentifiers(t)
	alerts := alertNames(t)
	keys, err := configref.Keys(filepath.Join(root, "internal", "config"))
	if err != nil {
		t.Fatal(err)
	}

	// How many mentions of each kind were read: a pattern that stops matching is a check that
	// cannot fail.
	seen := map[string]int{}
	defer func() {
		for _, kind := range []string{"metric", "backticked", "event", "condition", "config key"} {
			if seen[kind] < 3 {
				t.Errorf("only %d %s mentions read from the docs: is the pattern still right?", seen[kind], kind)
			}
		}
	}()
	for _, d := range operatorDocs(t) {
		where := func(off int) string { return fmt.Sprintf("%s:%d", d.path, lineOf(d.text, off)) }
		// Metrics.
		for _, loc := range metricRe.FindAllStringIndex(d.text, -1) {
			seen["metric"]++
			mention := d.text[loc[0]:loc[1]]
			names, prefix := expandMetric(mention)
			for _, n := range names {
				if prefix {
					if !anyWithPrefix(metrics, n) {
						t.Errorf("%s: %s matches no metric of the code", where(loc[0]), mention)
					}
				} else if !metricExists(metrics, n) {
					t.Errorf("%s: metric %s does not exist in the code%s", where(loc[0]), n, suggest(n, keysOf(metrics)))
				}
			}
		}
		// CamelCase names in backticks: a reason, condition, restore detail, alert, Go name, or
		// Kubernetes' own.
		for _, m := range backtickedRe.FindAllStringSubmatchIndex(d.text, -1) {
			seen["backticked"]++
			w, suffix := d.text[m[2]:m[3]], d.text[m[4]:m[5]]
			switch {
			case suffix == "*":
				if !anyKeyWithPrefix(reasons, w) && !anyKeyWithPrefix(conds, w) {
					t.Errorf("%s: `%s*` matches no Event reason or condition", where(m[0]), w)
				}
			case suffix == ":":
				if !details[w] {
					t.Errorf("%s: `%s:` is not a restore-failure detail of s3mount.Reason%s", where(m[0]), w, suggest(w, keysOfBool(details)))
				}
			case reasons[w], conds[w], details[w], alerts[w], idents[w], notPvrescueNames[w]:
			default:
				t.Errorf("%s: `%s` is no Event reason, Node condition, alert or Go name of the code%s",
					where(m[0]), w, suggest(w, keysOfBool(union(reasons, conds, details))))
			}
		}
		// Words the text calls an Event or a reason.
		for _, m := range eventCtxRe.FindAllStringSubmatchIndex(d.text, -1) {
			seen["event"]++
			w := group(d.text, m, 1, 2)
			if p, ok := strings.CutSuffix(w, "*"); ok {
				if !anyKeyWithPrefix(reasons, p) {
					t.Errorf("%s: %s matches no Event reason", where(m[0]), w)
				}
				continue
			}
			if !reasons[w] && !details[w] && !conds[w] {
				t.Errorf("%s: %q is named as an Event reason but is none%s", where(m[0]), w, suggest(w, keysOfBool(union(reasons, details))))
			}
		}
		for _, m := range condCtxRe.FindAllStringSubmatchIndex(d.text, -1) {
			seen["condition"]++
			if w := group(d.text, m, 1, 2); !conds[w] {
				t.Errorf("%s: %q is named as a Node condition but is none%s", where(m[0]), w, suggest(w, keysOfBool(conds)))
			}
		}
		// Configuration keys.
		for _, m := range configKeyRe.FindAllStringSubmatchIndex(d.text, -1) {
			seen["config key"]++
			k := d.text[m[2]:m[3]]
			if !configKeyExists(keys, k) {
				t.Errorf("%s: configuration key %s does not exist in internal/config%s", where(m[2]), k, suggest(k, configref.SortedPaths(keys)))
			}
		}
	}
}

// group returns the first of the submatches a or b that matched.
func group(s string, m []int, a, b int) string {
	if m[2*a] >= 0 {
		return s[m[2*a]:m[2*a+1]]
	}
	return s[m[2*b]:m[2*b+1]]
}

// configKeyExists: k is a key path, a map's entry segment matching any name.
func configKeyExists(keys []configref.Key, k string) bool {
	segs := strings.Split(k, ".")
	for _, key := range keys {
		ks := strings.Split(key.Path, ".")
		if len(ks) != len(segs) {
			continue
		}
		ok := true
		for i := range ks {
			ok = ok && (ks[i] == segs[i] || strings.HasPrefix(ks[i], "<"))
		}
		if ok {
			return true
		}
	}
	return false
}

// The YAML examples of the configuration file in the docs, and the chart's config value, are
// accepted by the strict decoder: every key in them exists.
func TestConfigExamplesParse(t *testing.T) {
	fence := regexp.MustCompile("(?s)```yaml\n(.*?)```")
	n := 0
	for _, d := range operatorDocs(t) {
		if !strings.HasSuffix(d.path, ".md") {
			continue
		}
		for _, m := range fence.FindAllStringSubmatchIndex(d.text, -1) {
			block := d.text[m[2]:m[3]]
			if !strings.Contains(block, "kind: "+config.Kind+"\n") || !strings.Contains(block, config.APIVersion) {
				continue
			}
			n++
			if _, err := config.Parse([]byte(block)); err != nil {
				t.Errorf("%s:%d: the configuration example does not parse: %v", d.path, lineOf(d.text, m[2]), err)
			}
		}
	}
	if n == 0 {
		t.Error("README.md has no ```yaml example of the configuration file (kind: Config)")
	}
	b, err := os.ReadFile(filepath.Join(root, "charts", "pvrescue", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config map[string]any `json:"config"`
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	cfg, err := yaml.Marshal(values.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.Parse(cfg); err != nil {
		t.Errorf("charts/pvrescue/values.yaml: config does not parse: %v", err)
	}
}

// alertRule is one alert of monitoring/pvrescue.rules.yaml.
type alertRule struct {
	Alert       string            `json:"alert"`
	Annotations map[string]string `json:"annotations"`
}

// alertRules reads the alerts (rules with an alert name) of monitoring/pvrescue.rules.yaml.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []alertRule `json:"rules"`
		} `json:"groups"`
	}
	b, err := os.ReadFile(filepath.Join(root, "monitoring", "pvrescue.rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no alerts in monitoring/pvrescue.rules.yaml")
	}
	return out
}

// alertNames is the set of alert names of monitoring/pvrescue.rules.yaml.
func alertNames(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, r := range alertRules(t) {
		out[r.Alert] = true
	}
	return out
}

// Every alert's runbook link points at a heading of docs/operations.md.
func TestRunbookLinksResolve(t *testing.T) {
	rules := alertRules(t)
	ops, err := os.ReadFile(filepath.Join(root, "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, l := range strings.Split(string(ops), "\n") {
		if h, ok := strings.CutPrefix(strings.TrimLeft(l, "#"), " "); ok && strings.HasPrefix(l, "#") {
			anchors[slug(h)] = true
		}
	}
	// alertRules fails the test when the file holds no alert.
	for _, r := range rules {
		u := r.Annotations["runbook_url"]
		_, frag, ok := strings.Cut(u, "docs/operations.md#")
		if !ok || !anchors[frag] {
			t.Errorf("alert %s: runbook_url %q is not a heading of docs/operations.md", r.Alert, u)
		}
	}
}

// slug is GitHub's anchor for a heading.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// ---- the code's names in the docs ----

func TestCodeNamesAreDocumented(t *testing.T) {
	docs := documentation(t)
	var all strings.Builder
	for _, d := range docs {
		all.WriteString(d.text)
		all.WriteString("\n")
	}
	text := all.String()
	mentioned := func(name string) bool {
		return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(name) + `($|[^A-Za-z0-9_])`).MatchString(text)
	}
	check := func(what string, names []string) {
		for _, n := range names {
			if !mentioned(n) {
				t.Errorf("%s %s is not documented in README.md or docs/", what, n)
			}
		}
	}
	check("metric", keysOf(codeMetrics(t)))
	check("Event reason", keysOfBool(contractNames(t, "Reason")))
	check("Node condition", keysOfBool(contractNames(t, "Condition")))
	check("restore-failure reason (s3mount.Reason)", keysOfBool(restoreDetails(t)))
	keys, err := configref.Keys(filepath.Join(root, "internal", "config"))
	if err != nil {
		t.Fatal(err)
	}
	check("configuration key", configref.SortedPaths(keys))
	// The metrics table of docs/operations.md has a row for each metric, with its type as the
	// code declares it (and no row for a metric that does not exist: TestDocumentedNamesExist).
	rows := metricsTable(t)
	for name, kind := range codeMetrics(t) {
		if r, ok := rows[name]; !ok {
			t.Errorf("docs/operations.md: no row for metric %s in the metrics table", name)
		} else if r.kind != kind {
			t.Errorf("docs/operations.md: metric %s is a %s, the table says %s", name, kind, r.kind)
		}
	}
}

// ---- helpers ----

func anyWithPrefix(m map[string]string, p string) bool {
	for k := range m {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func anyKeyWithPrefix(m map[string]bool, p string) bool {
	for k := range m {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func keysOfBool(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func union(ms ...map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			out[k] = true
		}
	}
	return out
}

// suggest names the closest known name, if one is close.
func suggest(w string, known []string) string {
	best, bestD := "", 4
	for _, k := range known {
		if d := distance(strings.ToLower(w), strings.ToLower(k)); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s?)", best)
}

// distance is the Levenshtein distance.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev = cur
	}
	return prev[len(b)]
}
