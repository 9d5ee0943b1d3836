package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// Environment of hack/bench/agentprof (its constants live in a main package).
const (
	agentProfileEnv      = "PVRESCUE_BENCH_CPUPROFILE"
	agentProfileAfterEnv = "PVRESCUE_BENCH_CPUPROFILE_AFTER"
)

// profiledRun is an idle agent run with a CPU profile.
type profiledRun struct {
	cpu     float64
	sampled time.Duration
	// total is pprof's "Total samples = …" figure.
	total string
	// top is `go tool pprof -top` (flat, then cumulative) as text; cum and flat its top 5 lines.
	top       string
	cum, flat []string
	why       string // when there is no profile
}

// profileIdleAgent runs bin/pvrescue-agent-prof (the agent's command with a CPU profile) like
// measureAgent, the profile covering the sampling window, and summarises it with go tool pprof.
func profileIdleAgent(ctx context.Context, o *Options, cs kubernetes.Interface, kcPath, dir, node string) (profiledRun, error) {
	var p profiledRun
	bin, err := requireBin(o, "pvrescue-agent-prof", "bench")
	if err != nil {
		return p, err
	}
	prof := filepath.Join(dir, "cpu.pprof")
	r, err := measureAgent(ctx, o, cs, bin, kcPath, dir, node, "profiled", []string{
		agentProfileEnv + "=" + prof, agentProfileAfterEnv + "=" + scaleSettle.String(),
	})
	if err != nil {
		return p, fmt.Errorf("profiled agent run: %w", err)
	}
	p.cpu, p.sampled = r.cpu, o.ScaleSample
	flat, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=40", bin, prof).CombinedOutput()
	if err != nil {
		p.why = fmt.Sprintf("go tool pprof: %v: %s", err, tail(string(flat), 400))
		return p, nil
	}
	cum, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-cum", "-nodecount=60", bin, prof).CombinedOutput()
	if err != nil {
		p.why = fmt.Sprintf("go tool pprof -cum: %v: %s", err, tail(string(cum), 400))
		return p, nil
	}
	p.top = "## flat\n" + string(flat) + "\n## cumulative\n" + string(cum)
	p.total = PprofTotal(string(flat))
	p.flat = PprofTop(string(flat), 5, func(string) bool { return true })
	// Cumulative: the agent's own code paths, not the scheduler frames every goroutine sits under.
	p.cum = PprofTop(string(cum), 5, func(fn string) bool {
		return !strings.HasPrefix(fn, "runtime.") && !strings.HasPrefix(fn, "sync.") && fn != "main.main" && !supervisorFrame(fn)
	})
	return p, nil
}

// supervisorFrame reports the agent's runnable wrappers, under which every rescue runs (they
// say nothing about where the time goes).
func supervisorFrame(fn string) bool {
	for _, w := range []string{"nodeagent.(*Agent).Run", "nodeagent.(*Agent).supervise", "nodeagent.runSafely", "nodeagent.RunnableFunc.Run"} {
		if strings.HasSuffix(fn, w) || strings.Contains(fn, w+".func") {
			return true
		}
	}
	return false
}

// PprofTotal returns the "Total samples = 120ms (0.6%)" figure of `go tool pprof -top` output.
func PprofTotal(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if i := strings.Index(l, "Total samples = "); i >= 0 {
			return strings.TrimSpace(l[i+len("Total samples = "):])
		}
	}
	return "?"
}

// PprofTop returns the first n rows of `go tool pprof -top` output whose function keep accepts,
// each as "function (flat X, cum Y)".
func PprofTop(out string, n int, keep func(fn string) bool) []string {
	var rows []string
	header := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if !header {
			header = len(f) >= 5 && f[0] == "flat" && f[1] == "flat%"
			continue
		}
		if len(f) < 6 {
			continue
		}
		fn := strings.Join(f[5:], " ")
		if !keep(fn) {
			continue
		}
		rows = append(rows, fmt.Sprintf("%s (flat %s %s, cum %s %s)", fn, f[0], f[1], f[3], f[4]))
		if len(rows) == n {
			break
		}
	}
	return rows
}
