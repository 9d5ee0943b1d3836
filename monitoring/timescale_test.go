package monitoring_test

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"

	"github.com/pvrescue/pvrescue/monitoring"
)

func timeScaled(t *testing.T, factor int) (*rulefmt.RuleGroups, []byte, []monitoring.Scaled) {
	t.Helper()
	src, err := monitoring.FS.ReadFile(monitoring.RulesFile)
	if err != nil {
		t.Fatal(err)
	}
	out, changed, err := monitoring.TimeScaled(src, factor)
	if err != nil {
		t.Fatalf("TimeScaled(%d): %v", factor, err)
	}
	rgs, errs := rulefmt.Parse(out, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("scaled rules do not parse: %v\n%s", errs, out)
	}
	return rgs, out, changed
}

func alertRules(rgs *rulefmt.RuleGroups) map[string]rulefmt.Rule {
	m := map[string]rulefmt.Rule{}
	for _, g := range rgs.Groups {
		for _, r := range g.Rules {
			m[g.Name+"/"+r.Alert] = r
		}
	}
	return m
}

// Factor 1 changes nothing: the transform keeps every rule as written.
func TestTimeScaledIdentity(t *testing.T) {
	got, _, changed := timeScaled(t, 1)
	if diff := cmp.Diff(alertRules(rules(t)), alertRules(got)); diff != "" {
		t.Errorf("TimeScaled(1) changed the rules (-orig +scaled):\n%s", diff)
	}
	for _, c := range changed {
		if c.From != c.To {
			t.Errorf("TimeScaled(1) reported a change: %+v", c)
		}
	}
}

// Factor 60: every `for:` and age threshold is divided by 60, everything else is the same.
func TestTimeScaledDividesWaitingTimes(t *testing.T) {
	orig := alertRules(rules(t))
	rgs, _, changed := timeScaled(t, 60)
	got := alertRules(rgs)
	if len(got) != len(orig) {
		t.Fatalf("%d alerts after scaling, %d before", len(got), len(orig))
	}
	for name, o := range orig {
		s := got[name]
		if want := time.Duration(o.For) / 60; time.Duration(s.For) != want {
			t.Errorf("%s: for %s, want %s", name, s.For, model.Duration(want))
		}
		if !cmp.Equal(o.Labels, s.Labels) || !cmp.Equal(o.Annotations, s.Annotations) {
			t.Errorf("%s: labels or annotations changed", name)
		}
	}
	// The two lost-disk alerts wait through an age in their expression, not through `for:`.
	for name, want := range map[string][2]string{
		"pvrescue.localdisk/PVRescueLocalDiskMissingTooLong": {"> 1800", "> 30"},
		"pvrescue.localdisk/PVRescueFakeDeviceActiveTooLong": {"> 3600", "> 60"},
	} {
		o, s := orig[name].Expr, got[name].Expr
		if !strings.Contains(o, want[0]) {
			t.Fatalf("%s: expression no longer holds %q; update this test with the rule:\n%s", name, want[0], o)
		}
		if wantExpr := strings.Replace(o, want[0], want[1], 1); s != wantExpr {
			t.Errorf("%s: scaled expression\n%s\nwant\n%s", name, s, wantExpr)
		}
	}
	// Expressions without an age keep their text exactly.
	for name, o := range orig {
		if !strings.Contains(o.Expr, "time()") && got[name].Expr != o.Expr {
			t.Errorf("%s: expression without an age changed:\n%s\n→\n%s", name, o.Expr, got[name].Expr)
		}
	}
	var fors, ages int
	for _, c := range changed {
		switch c.What {
		case "for":
			fors++
		case "age threshold":
			ages++
		}
	}
	if fors == 0 || ages != 2 {
		t.Errorf("changes reported: %d for:, %d age thresholds (want some and 2): %+v", fors, ages, changed)
	}
}

// The scaled file is what the e2e Prometheus (Debian's 2.42) loads: its promtool must accept it.
func TestTimeScaledPromtoolCheck(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found in PATH: it comes with Debian's prometheus package (apt-get install -y prometheus): %v", err)
	}
	_, out, _ := timeScaled(t, 60)
	f := filepath.Join(t.TempDir(), "scaled.rules.yaml")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command(promtool, "check", "rules", f).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules on the scaled file: %v\n%s\n%s", err, b, out)
	}
}

func TestTimeScaledExpressions(t *testing.T) {
	src := func(expr string) []byte {
		return []byte("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: " + expr + "\n    for: 10m\n")
	}
	for _, tc := range []struct{ in, want string }{
		{`time() - x > 1800`, `time() - x > 30`},
		{`(time() - x > 3600) and on (pv) (y == 1)`, `(time() - x > 60) and on (pv) (y == 1)`},
		{`120 < (time() - x)`, `2 < (time() - x)`},
		{`sum(increase(x_total[15m])) > 3`, `sum(increase(x_total[15m])) > 3`},
		{`x == 0`, `x == 0`},
		{`time() - x > 90`, `time() - x > 1.5`},
	} {
		out, _, err := monitoring.TimeScaled(src(tc.in), 60)
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		rgs, errs := rulefmt.Parse(out, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			t.Errorf("%s: %v", tc.in, errs)
			continue
		}
		r := rgs.Groups[0].Rules[0]
		if r.Expr != tc.want || time.Duration(r.For) != 10*time.Second {
			t.Errorf("%s → %q for %s, want %q for 10s", tc.in, r.Expr, r.For, tc.want)
		}
	}
	if _, _, err := monitoring.TimeScaled(src("x == 0"), 0); !errors.Is(err, monitoring.ErrBadFactor) {
		t.Errorf("factor 0: err %v, want ErrBadFactor", err)
	}
	if _, _, err := monitoring.TimeScaled(src("x =="), 2); err == nil {
		t.Errorf("a broken expression was accepted")
	}
}
