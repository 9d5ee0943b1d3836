package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"
)

// windowPassLines are the agent's log lines that say where an incident's time went: each restore
// pass's phases (PV read, replay over, bridge up, targets bound, containers done), the driver's
// answer, the bridge's start and errors — quoted whole.
var windowPassLines = []string{"restore pass over", "driver does not answer", "starting s3fs", "bridge mount ready", "error"}

// windowTargetLines are logged once per target or pod (100 of each at 100 pods): quoted as their
// first and last line and a count, so the pass lines fit in the excerpt.
var windowTargetLines = []string{"found dead S3 mount", "restored S3 mount", "remounted in containers"}

// windowSlowNotes returns, for each shipped window cell whose p99 is over windowTarget, the
// agent's log lines of its incidents (headed "=== window <case>, <pods> pod(s)" in the window
// agent log) that say where the time went.
func windowSlowNotes(agentLog string, r *pluginBenchResult) []string {
	cells, _ := poolWindowCells(r.Window)
	var notes []string
	for _, c := range cells {
		ms := c.ContainerWindowMs
		if len(ms) == 0 {
			ms = c.WindowMs
		}
		ds := make([]time.Duration, len(ms))
		for i, m := range ms {
			ds[i] = time.Duration(m * float64(time.Millisecond))
		}
		if c.Behaviour != "shipped" || Percentile(ds, 99) <= windowTarget {
			continue
		}
		notes = append(notes, fmt.Sprintf("Over its target (p99 %s > %s): window %s, %d pod(s). Where the time went, from the agent's log of its incidents:\n\n~~~text\n%s\n~~~",
			Ms(Percentile(ds, 99)), Ms(windowTarget), c.Case, c.Pods, windowLogLines(agentLog, c.Case, c.Pods, 30)))
	}
	return notes
}

// windowLogLines returns the headings of the window agent log's incidents of kind with pods pods
// and, under each, its windowPassLines and the first and last of each of its windowTargetLines
// with their count (at most max lines in all).
func windowLogLines(path, kind string, pods, max int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	defer func() { _ = f.Close() }()
	heading := fmt.Sprintf("=== window %s, %d pod(s)", kind, pods)
	var out []string
	// Per incident: the first and last line of each per-target message, and how many.
	first, last, count := map[string]string{}, map[string]string{}, map[string]int{}
	flush := func() {
		for _, w := range windowTargetLines {
			if count[w] == 0 {
				continue
			}
			out = append(out, first[w])
			if count[w] > 1 {
				out = append(out, fmt.Sprintf("… %d %q lines in all; the last:", count[w], w), last[w])
			}
		}
		clear(first)
		clear(last)
		clear(count)
	}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "=== ") {
			if in {
				flush()
			}
			in = strings.HasPrefix(l, heading)
			if in {
				out = append(out, l)
			}
			continue
		}
		if !in {
			continue
		}
		if w, ok := containsAny(l, windowTargetLines); ok {
			if count[w] == 0 {
				first[w] = l
			}
			last[w] = l
			count[w]++
		} else if _, ok := containsAny(l, windowPassLines); ok {
			out = append(out, l)
		}
	}
	if in {
		flush()
	}
	if len(out) == 0 {
		return "(no incident of this cell in the log)"
	}
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("… %d more lines", len(out)-max))
	}
	return strings.Join(out, "\n")
}

// containsAny returns the first of words that l contains.
func containsAny(l string, words []string) (string, bool) {
	for _, w := range words {
		if strings.Contains(l, w) {
			return w, true
		}
	}
	return "", false
}
