package main

import (
	"strings"
	"testing"
	"time"
)

func TestReportSaysWhichBaselinesAreComputed(t *testing.T) {
	measured := Section{Title: "mount", Header: []string{"figure", "p99", "baseline", "target"}, Rows: [][]string{
		{"replay", "46 ms", "same replay, periodic check alone", "met"},
		{"detection", "4 ms", "a 1s poll (computed: uniform delay)", "met"},
	}}
	disk := Section{Title: "disk", Header: []string{"figure", "p50", "baseline: 10 s poll, computed (p50 / p99)"}, Rows: [][]string{
		{"link removed → fake", "40 ms", "5.00 s / 9.90 s"},
	}}
	var b strings.Builder
	r := &Report{Started: time.Unix(0, 0), Command: "make bench", Sections: []Section{measured, disk}}
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(b.String(), "## Machine")
	for _, want := range []string{"except 2 computed", "mount: detection", "disk: link removed → fake"} {
		if !strings.Contains(head, want) {
			t.Errorf("opening lines should say %q:\n%s", want, head)
		}
	}
	if strings.Contains(head, "mount: replay") || strings.Contains(head, "beside a baseline measured in the same run") {
		t.Errorf("opening lines name a measured baseline as computed, or claim every baseline measured:\n%s", head)
	}

	b.Reset()
	r.Sections = []Section{{Title: "mount", Header: measured.Header, Rows: measured.Rows[:1]}}
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "beside a baseline measured in the same run") {
		t.Errorf("with every baseline measured the report should say so:\n%s", b.String())
	}
}

func TestWindowRowsSayHowManyIncidents(t *testing.T) {
	one := windowCase{Behaviour: "shipped", Case: "deleted", Pods: 2, ContainerWindowMs: []float64{60, 70}, WindowMs: []float64{50, 55}, FailedReads: 1}
	twice := windowCase{Behaviour: "shipped", Case: "rolled", Pods: 1, ContainerWindowMs: []float64{80}, WindowMs: []float64{75}, FailedReads: 2}
	s := &Section{}
	windowRows(s, &pluginBenchResult{Window: []windowCase{one, twice, twice}})
	if len(s.Rows) != 2 {
		t.Fatalf("want one row per cell (2), got %d: %v", len(s.Rows), s.Rows)
	}
	if got := s.Rows[0][1]; !strings.Contains(got, "n = 1") {
		t.Errorf("a cell of one incident should say n = 1, samples column %q", got)
	}
	if got := s.Rows[1][1]; !strings.HasPrefix(got, "2 (2 incidents") {
		t.Errorf("a cell of two incidents should pool them, samples column %q", got)
	}
	if !strings.Contains(s.Rows[1][5], "reads 4 of") {
		t.Errorf("pooled failed reads should add up (2+2): %q", s.Rows[1][5])
	}
}
