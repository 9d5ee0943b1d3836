package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"time"
)

// windowPassLines are the agent's log lines that say where an incident's time went: when the
// loss was found, each restore pass's phases (PV read, replay over, bridge up, targets bound,
// containers done), each target restored and each pod's containers remounted.
var windowPassLines = []string{"found dead S3 mount", "restore pass over", "driver does not answer", "restored S3 mount", "remounted in containers", "error"}

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
// and, under each, its windowPassLines (at most max lines in all).
func windowLogLines(path, kind string, pods, max int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	defer func() { _ = f.Close() }()
	heading := fmt.Sprintf("=== window %s, %d pod(s)", kind, pods)
	var out []string
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() && len(out) < max {
		l := sc.Text()
		if strings.HasPrefix(l, "=== ") {
			in = strings.HasPrefix(l, heading)
			if in {
				out = append(out, l)
			}
			continue
		}
		if !in {
			continue
		}
		for _, w := range windowPassLines {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	if len(out) == 0 {
		return "(no incident of this cell in the log)"
	}
	return strings.Join(out, "\n")
}
