package monitoring

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strconv"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// ErrBadFactor is returned by TimeScaled for a factor below 1.
var ErrBadFactor = errors.New("time scale factor must be at least 1")

// Scaled is one waiting time TimeScaled changed, for the narration of a test.
type Scaled struct {
	Alert    string
	What     string // "for" or "age threshold"
	From, To string
}

// TimeScaled returns a rule file with every waiting time of its alerts divided by factor, so a test
// can watch an alert go pending, fire and resolve in seconds instead of minutes (factor 60: a
// minute becomes a second). The waiting times are an alert's `for:` and each age threshold of its
// expression: the number compared with `time() - <gauge>` (seconds since the agent saw a disk go
// missing or made a fake). Nothing else changes: the expression text is kept byte for byte but for
// those numbers, and range windows (`[10m]`: how much history a rate counts, not a wait), labels,
// annotations and recording rules stay as they are. The test that uses it therefore proves the
// same expressions the chart ships; only the clock runs faster.
func TimeScaled(rules []byte, factor int) ([]byte, []Scaled, error) {
	if factor < 1 {
		return nil, nil, fmt.Errorf("%w, got %d", ErrBadFactor, factor)
	}
	rgs, errs := rulefmt.Parse(rules, false, model.UTF8Validation, promql, slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		return nil, nil, fmt.Errorf("parse rules: %w", errors.Join(errs...))
	}
	var changed []Scaled
	for gi := range rgs.Groups {
		for ri := range rgs.Groups[gi].Rules {
			r := &rgs.Groups[gi].Rules[ri]
			if r.Alert == "" {
				continue
			}
			if r.For > 0 {
				to := model.Duration(int64(r.For) / int64(factor))
				changed = append(changed, Scaled{Alert: r.Alert, What: "for", From: r.For.String(), To: to.String()})
				r.For = to
			}
			expr, ch, err := scaleAgeThresholds(r.Expr, factor)
			if err != nil {
				return nil, nil, fmt.Errorf("alert %s: %w", r.Alert, err)
			}
			r.Expr = expr
			for _, c := range ch {
				c.Alert = r.Alert
				changed = append(changed, c)
			}
		}
	}
	out, err := yaml.Marshal(rgs)
	if err != nil {
		return nil, nil, fmt.Errorf("encode rules: %w", err)
	}
	return out, changed, nil
}

// scaleAgeThresholds divides by factor every number that a comparison sets against an age,
// `time() - x`, and returns the expression text with only those numbers replaced.
func scaleAgeThresholds(expr string, factor int) (string, []Scaled, error) {
	e, err := promql.ParseExpr(expr)
	if err != nil {
		return "", nil, err
	}
	var lits []*parser.NumberLiteral
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		b, ok := n.(*parser.BinaryExpr)
		if !ok || !b.Op.IsComparisonOperator() {
			return nil
		}
		if lit, ok := unparen(b.RHS).(*parser.NumberLiteral); ok && isAge(b.LHS) {
			lits = append(lits, lit)
		}
		if lit, ok := unparen(b.LHS).(*parser.NumberLiteral); ok && isAge(b.RHS) {
			lits = append(lits, lit)
		}
		return nil
	})
	// Replace from the end so earlier positions stay valid.
	sort.Slice(lits, func(i, j int) bool { return lits[i].PosRange.Start > lits[j].PosRange.Start })
	var changed []Scaled
	for _, lit := range lits {
		start, end := int(lit.PosRange.Start), int(lit.PosRange.End)
		if start < 0 || end > len(expr) || start >= end {
			return "", nil, fmt.Errorf("threshold position %d-%d outside the expression", start, end)
		}
		to := strconv.FormatFloat(lit.Val/float64(factor), 'f', -1, 64)
		changed = append(changed, Scaled{What: "age threshold", From: expr[start:end] + "s", To: to + "s"})
		expr = expr[:start] + to + expr[end:]
	}
	if _, err := promql.ParseExpr(expr); err != nil {
		return "", nil, fmt.Errorf("scaled expression does not parse: %w", err)
	}
	return expr, changed, nil
}

func unparen(e parser.Expr) parser.Expr {
	for {
		p, ok := e.(*parser.ParenExpr)
		if !ok {
			return e
		}
		e = p.Expr
	}
}

// isAge: `time() - x` (an age in seconds).
func isAge(e parser.Expr) bool {
	b, ok := unparen(e).(*parser.BinaryExpr)
	if !ok || b.Op != parser.SUB {
		return false
	}
	c, ok := unparen(b.LHS).(*parser.Call)
	return ok && c.Func != nil && c.Func.Name == "time"
}
