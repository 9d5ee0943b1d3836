package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// BenchResult is one line of `go test -bench -benchmem` output.
type BenchResult struct {
	Name                 string
	NsPerOp              float64
	BytesPerOp, AllocsOp float64
	// P99Ns is the benchmark's own "p99-ns" metric (b.ReportMetric), 0 when it reports none.
	P99Ns float64
}

// ParseBenchOutput returns the benchmark lines of go test output, in order; "-N" GOMAXPROCS
// suffixes are stripped so repeated runs group under one name.
func ParseBenchOutput(out string) []BenchResult {
	var rs []BenchResult
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		r := BenchResult{Name: f[0]}
		if i := strings.LastIndexByte(r.Name, '-'); i > 0 {
			if _, err := strconv.Atoi(r.Name[i+1:]); err == nil {
				r.Name = r.Name[:i]
			}
		}
		ok := false
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "ns/op":
				r.NsPerOp, ok = v, true
			case "B/op":
				r.BytesPerOp = v
			case "allocs/op":
				r.AllocsOp = v
			case "p99-ns":
				r.P99Ns = v
			}
		}
		if ok {
			rs = append(rs, r)
		}
	}
	return rs
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtNs(ns float64) string {
	if ns < 1e6 {
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return Ms(time.Duration(ns))
}

func runGoBench(ctx context.Context, o *Options) Section {
	pkgs := []string{"./webhook/", "./sidecar/", "./hack/bench/gobench/"}
	args := []string{"test", "-run", "^$", "-bench", ".", "-benchmem", "-benchtime", "300ms", "-count", strconv.Itoa(o.BenchCount)}
	args = append(args, pkgs...)
	raw := filepath.Join(o.RawDir, "gobench.txt")
	s := Section{
		Title: "Go benchmarks (hot paths)",
		RanAgainst: fmt.Sprintf("in-process calls, no I/O: `go %s`; raw output for benchstat in `%s`. "+
			"Lookups come from webhook.StaticLookup (the API server is measured in the load run above).", strings.Join(args, " "), raw),
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = o.Root
	out, err := cmd.CombinedOutput()
	if mkErr := os.MkdirAll(filepath.Join(o.Root, o.RawDir), 0o755); mkErr != nil {
		s.Err = mkErr
		return s
	}
	if wErr := os.WriteFile(filepath.Join(o.Root, raw), out, 0o644); wErr != nil {
		s.Err = wErr
		return s
	}
	if err != nil {
		lines := GoTestFailure(string(out))
		what := goTestHeadline(lines)
		if what == "" {
			what = "no failure line in its output"
		}
		s.Err = errors.New(failureText(fmt.Sprintf("go test -bench (%s): %v: %s", strings.Join(pkgs, " "), err, what), lines, raw))
		return s
	}
	results := ParseBenchOutput(string(out))
	if len(results) == 0 {
		s.Err = fmt.Errorf("no benchmark lines in the output (%s)", raw)
		return s
	}
	by := map[string][]BenchResult{}
	var order []string
	for _, r := range results {
		if _, ok := by[r.Name]; !ok {
			order = append(order, r.Name)
		}
		by[r.Name] = append(by[r.Name], r)
	}
	med := func(name string, f func(BenchResult) float64) float64 {
		var v []float64
		for _, r := range by[name] {
			v = append(v, f(r))
		}
		return median(v)
	}
	ns := func(r BenchResult) float64 { return r.NsPerOp }
	s.Header = []string{"benchmark", "runs", "median time/op", "median p99", "B/op", "allocs/op", "vs floor"}
	for _, name := range order {
		vs := "—"
		if strings.Contains(name, "handler=pvrescue") {
			floor := strings.Replace(name, "handler=pvrescue", "handler=floor", 1)
			vs = Ratio(med(name, ns), med(floor, ns))
		}
		p99 := "—"
		if v := med(name, func(r BenchResult) float64 { return r.P99Ns }); v > 0 {
			p99 = fmtNs(v)
		}
		s.Rows = append(s.Rows, []string{name, strconv.Itoa(len(by[name])), fmtNs(med(name, ns)), p99,
			fmt.Sprintf("%.0f", med(name, func(r BenchResult) float64 { return r.BytesPerOp })),
			fmt.Sprintf("%.0f", med(name, func(r BenchResult) float64 { return r.AllocsOp })), vs})
	}
	var none []string
	for _, p := range pkgs[:2] {
		if !hasBenchFor(string(out), p) {
			none = append(none, p)
		}
	}
	if len(none) > 0 {
		s.Notes = append(s.Notes, fmt.Sprintf("%s hold no benchmarks of their own yet; the hot paths are benchmarked through their exported APIs in hack/bench/gobench.", strings.Join(none, " and ")))
	}
	s.Notes = append(s.Notes, "ServeHTTP rows (webhook package): one whole admission over HTTP as the server runs it — webhook.Webhook reads the body, decodes a pod CREATE once straight into the pod, runs the handler and encodes the patch and the response — for the load run's 4-PVC and ~64 KB pods; their cpu-ns/op in the raw output is the process's CPU time per admission, garbage collection included.")
	s.Notes = append(s.Notes, "Handler rows: the whole admission.Handler (decode, classify, inject, JSON patch of the operations performed) beside the no-op defaulter of controller-runtime's framework (which decodes, re-encodes and diffs the pod). p99 is each call timed in the benchmark loop; target for pod=100vol (60 local block claims across 3 containers, 40 S3 mounts): handler p99 < 10 ms.",
		"Compare runs with `benchstat old.txt "+raw+"`.")
	return s
}

// hasBenchFor reports whether any benchmark line came from package dir (go test prints
// "pkg: <import path>" before its benchmarks).
func hasBenchFor(out, dir string) bool {
	want := "pkg: github.com/pvrescue/pvrescue/" + strings.Trim(dir, "./")
	i := strings.Index(out, want)
	if i < 0 {
		return false
	}
	rest := out[i+len(want):]
	if j := strings.Index(rest, "\npkg: "); j >= 0 {
		rest = rest[:j]
	}
	return len(ParseBenchOutput(rest)) > 0
}
