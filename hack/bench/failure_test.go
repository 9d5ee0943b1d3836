package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The e2e benchmark failing in its third run: the runs' logs, the t.Fatalf with a continuation
// line, framework.Up's log tails (20 lines each) and the teardown log.
const benchFailOutput = `goos: linux
goarch: amd64
pkg: github.com/pvrescue/pvrescue/e2e/scenarios
cpu: Intel(R) Xeon(R) Processor
BenchmarkPluginPodDeleted
--- FAIL: BenchmarkPluginPodDeleted
    suite_e2e_test.go:77: pvrescue installed in 21.3s; deviations from ` + "`kubectl apply -k manifests/`" + `:
    suite_e2e_test.go:79:   - images from the local registry
    bench_plugin_e2e_test.go:199: run 0: plugin pod csi-s3-yandex-abc deleted → its s3fs [4242] exited 1.402s, target readable 1.811s
    bench_plugin_e2e_test.go:199: run 1: plugin pod csi-s3-yandex-def deleted → its s3fs [4399] exited 1.398s, target readable 1.790s
    bench_plugin_e2e_test.go:172: run 2: /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount/app.txt not readable again within 3m of its s3fs [4511] exiting
        stack at the target [fuse.s3fs bucket:/yandex]
    framework.go:70: --- last lines of kubelet.log ---
        I1202 10:00:00.000000 1 kubelet.go:1 one
        I1202 10:00:00.000000 1 kubelet.go:2 two
        I1202 10:00:00.000000 1 kubelet.go:3 three
    framework.go:70: --- last lines of kube-scheduler.log ---
        I1202 10:00:00.000000 1 scheduler.go:1 one
    framework.go:77: cluster torn down in 4.2s
FAIL
exit status 1
FAIL	github.com/pvrescue/pvrescue/e2e/scenarios	245.123s
FAIL
`

func TestGoTestFailure(t *testing.T) {
	long := []string{"--- FAIL: TestLong (0.01s)", "    x_test.go:9: many lines"}
	longOut := strings.Join(long, "\n") + "\n"
	for i := 0; i < 12; i++ {
		longOut += "        line\n"
	}
	for _, tc := range []struct {
		name, out string
		want      []string
	}{
		{"passed", "PASS\nok  \tgithub.com/x/y\t0.1s\n", nil},
		{"passed with -v logs", "=== RUN   TestA\n    a_test.go:3: hello\n--- PASS: TestA (0.00s)\nPASS\n", nil},
		{"benchmark: messages kept, log dumps reduced to their header", benchFailOutput, []string{
			"--- FAIL: BenchmarkPluginPodDeleted",
			"    suite_e2e_test.go:77: pvrescue installed in 21.3s; deviations from `kubectl apply -k manifests/`:",
			"    suite_e2e_test.go:79:   - images from the local registry",
			"    bench_plugin_e2e_test.go:199: run 0: plugin pod csi-s3-yandex-abc deleted → its s3fs [4242] exited 1.402s, target readable 1.811s",
			"    bench_plugin_e2e_test.go:199: run 1: plugin pod csi-s3-yandex-def deleted → its s3fs [4399] exited 1.398s, target readable 1.790s",
			"    bench_plugin_e2e_test.go:172: run 2: /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount/app.txt not readable again within 3m of its s3fs [4511] exiting",
			"        stack at the target [fuse.s3fs bucket:/yandex]",
			"    framework.go:70: --- last lines of kubelet.log --- [3 log lines: in the log file]",
			"    framework.go:70: --- last lines of kube-scheduler.log --- [1 log lines: in the log file]",
			"    framework.go:77: cluster torn down in 4.2s",
			"FAIL\tgithub.com/pvrescue/pvrescue/e2e/scenarios\t245.123s",
		}},
		{"subtests: the passed one's logs left out", `--- FAIL: TestPVRescue (80.00s)
    framework.go:61: cluster up in 20s
    --- PASS: TestPVRescue/LostLocalDisk (10.00s)
        localdisk_e2e_test.go:40: RESULT fine
    --- FAIL: TestPVRescue/LostFUSEMount (12.00s)
        fuse_agent_e2e_test.go:88: no evidence the mount died: stat after the kill gave <nil>
            and 1 mount(s) sit at the target
FAIL
`, []string{
			"--- FAIL: TestPVRescue (80.00s)",
			"    framework.go:61: cluster up in 20s",
			"    --- FAIL: TestPVRescue/LostFUSEMount (12.00s)",
			"        fuse_agent_e2e_test.go:88: no evidence the mount died: stat after the kill gave <nil>",
			"            and 1 mount(s) sit at the target",
		}},
		{"test timeout panic: up to the blank line", `BenchmarkPluginPodDeleted
panic: test timed out after 20m0s
	running tests:
		BenchmarkPluginPodDeleted (20m0s)

goroutine 1 [running]:
testing.(*M).startAlarm.func1()
FAIL	github.com/pvrescue/pvrescue/e2e/scenarios	1200.012s
`, []string{
			"panic: test timed out after 20m0s",
			"\trunning tests:",
			"\t\tBenchmarkPluginPodDeleted (20m0s)",
			"FAIL\tgithub.com/pvrescue/pvrescue/e2e/scenarios\t1200.012s",
		}},
		{"build failure", `# github.com/pvrescue/pvrescue/e2e/scenarios [github.com/pvrescue/pvrescue/e2e/scenarios.test]
scenarios/bench_plugin_e2e_test.go:12:2: "maps" imported and not used
FAIL	github.com/pvrescue/pvrescue/e2e/scenarios [build failed]
`, []string{
			"# github.com/pvrescue/pvrescue/e2e/scenarios [github.com/pvrescue/pvrescue/e2e/scenarios.test]",
			`scenarios/bench_plugin_e2e_test.go:12:2: "maps" imported and not used`,
			"FAIL\tgithub.com/pvrescue/pvrescue/e2e/scenarios [build failed]",
		}},
		{"a long message cut after 8 lines", longOut, append(append(long, slices.Repeat([]string{"        line"}, 8)...), "        … 4 more lines: in the log file")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := GoTestFailure(tc.out)
			if !slices.Equal(got, tc.want) {
				t.Errorf("GoTestFailure =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestGoTestHeadline(t *testing.T) {
	for _, tc := range []struct {
		name, out, want string
	}{
		{"the Fatalf before the cleanups' log dumps", benchFailOutput,
			"bench_plugin_e2e_test.go:172: run 2: /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount/app.txt not readable again within 3m of its s3fs [4511] exiting"},
		{"a panic first", "--- FAIL: TestX (1.00s)\n    x_test.go:3: log\npanic: boom\n\ngoroutine 5\n", "panic: boom"},
		{"a build error", "# pkg\nx.go:1:2: undefined: y\nFAIL\tpkg [build failed]\n", "x.go:1:2: undefined: y"},
		{"no log dump: the last message", "--- FAIL: TestX (1.00s)\n    x_test.go:3: first\n    x_test.go:4: second\n", "x_test.go:4: second"},
		{"nothing", "PASS\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := goTestHeadline(GoTestFailure(tc.out)); got != tc.want {
				t.Errorf("goTestHeadline = %q, want %q", got, tc.want)
			}
		})
	}
}

// The e2e section's failure says first which benchmark failed, after how many runs, and its
// first failure message (from the result file when there is one), then go test's failure lines,
// then where the whole output is.
func TestE2EFailure(t *testing.T) {
	runErr := errors.New("exit status 1")
	partial := &pluginBenchResult{ReadableMs: []float64{1811, 1790}, ExitMs: []float64{1402, 1398},
		Failures: []string{"run 2: target not readable again within 3m\nstack at the target [fuse.s3fs]", "cleanup: delete PV: gone"}}
	for _, tc := range []struct {
		name    string
		readErr error
		r       *pluginBenchResult
		out     string
		head    string
	}{
		{"from the result file", nil, partial, benchFailOutput,
			"BenchmarkPluginPodDeleted (e2e/scenarios, go test exit status 1; 2 of 8 runs measured): run 2: target not readable again within 3m (and 1 more failure(s), below)"},
		{"no result file: from go test's output", os.ErrNotExist, &pluginBenchResult{}, benchFailOutput,
			"BenchmarkPluginPodDeleted (e2e/scenarios, go test exit status 1; no result file): bench_plugin_e2e_test.go:172: run 2: /var/lib/kubelet/pods/u/volumes/kubernetes.io~csi/pv/mount/app.txt not readable again within 3m of its s3fs [4511] exiting"},
		{"nothing to go on: go test's error", os.ErrNotExist, &pluginBenchResult{}, "signal: killed\n",
			"BenchmarkPluginPodDeleted (e2e/scenarios, go test exit status 1; no result file): exit status 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := e2eFailure(runErr, tc.readErr, tc.r, 8, tc.out, "bench/e2e-go-test.log")
			lines := strings.Split(got, "\n")
			if lines[0] != tc.head {
				t.Errorf("first line = %q\nwant        %q", lines[0], tc.head)
			}
			if last := lines[len(lines)-1]; last != "whole output: bench/e2e-go-test.log" {
				t.Errorf("last line = %q, want the log file named", last)
			}
			if strings.Contains(got, "kubelet.go:1 one") {
				t.Errorf("a kubelet log line is in the failure text:\n%s", got)
			}
			if want := GoTestFailure(tc.out); !slices.Equal(lines[1:len(lines)-1], want) {
				t.Errorf("detail lines =\n%s\nwant go test's failure lines\n%s", strings.Join(lines[1:len(lines)-1], "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// A failed section's report says FAILED right under its title, the detail in a block, before
// anything else of the section; the figures measured before the failure follow, marked so.
func TestReportFailedSectionFirst(t *testing.T) {
	r := &Report{Started: time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC), Command: "make bench", Sections: []Section{
		{Title: "Plugin pod deleted", RanAgainst: "a cluster", Load: "1.00",
			Err:    errors.New("BenchmarkPluginPodDeleted (…): run 2: not readable\n--- FAIL: BenchmarkPluginPodDeleted\n    x.go:1: run 2: not readable\nwhole output: bench/e2e-go-test.log"),
			Header: []string{"figure", "p50"}, Rows: [][]string{{"readable", "1.8 s"}}},
		{Title: "Passed", RanAgainst: "a rig", Load: "0.50", Header: []string{"figure"}, Rows: [][]string{{"x"}}},
		{Title: "One-line failure", Load: "0.10", Err: errors.New("needs root")},
	}}
	var b strings.Builder
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"## Plugin pod deleted\n\n**FAILED:** BenchmarkPluginPodDeleted (…): run 2: not readable\n\n~~~text\n--- FAIL: BenchmarkPluginPodDeleted\n    x.go:1: run 2: not readable\nwhole output: bench/e2e-go-test.log\n~~~\n\nThe figures below are those measured before the failure.\n\nRan against: a cluster\n\n",
		"## Passed\n\nRan against: a rig\n\n",
		"## One-line failure\n\n**FAILED:** needs root\n\nLoad average at start: 0.10",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks\n%s\n---- report:\n%s", want, got)
		}
	}
	if strings.Count(got, "FAILED") != 2 {
		t.Errorf("want FAILED twice (the passed section has none):\n%s", got)
	}
}

// The e2e section's table comes from what the benchmark measured, the runs before a failure
// included; the outage is each run's readable minus its exit.
func TestE2EFigures(t *testing.T) {
	r := &pluginBenchResult{ReadableMs: []float64{1800, 2000}, ExitMs: []float64{1500, 1400}, RegisteredMs: []float64{3000, 3100},
		MountIDKind: "unique", Runs: []pluginBenchRun{
			{DeadPids: []int{10}, LivePids: []int{20}, MountIDBefore: 100, MountIDAfter: 101, DeadFound: 1, Restored: 1},
			{DeadPids: []int{20}, LivePids: []int{30}, MountIDBefore: 101, MountIDAfter: 101, DeadFound: 0, Restored: 1},
		}}
	var s Section
	e2eFigures(&s, r, time.Minute)
	if len(s.Rows) < 4 {
		t.Fatalf("rows = %v", s.Rows)
	}
	if got := s.Rows[2]; !strings.HasPrefix(got[0], "  the outage") || got[1] != "2" || got[2] != Ms(300*time.Millisecond) || got[4] != Ms(600*time.Millisecond) {
		t.Errorf("outage row = %v, want 2 samples, p50 300 ms, max 600 ms", got)
	}
	if !strings.Contains(s.Raw, "containerized-outage 300.000 600.000\n") {
		t.Errorf("raw samples lack the outage:\n%s", s.Raw)
	}
	if !strings.Contains(s.Raw, "run 1: s3fs [20] exited; s3fs [30] serve after; mount ID (unique) 101 → 101; agent: dead mounts found +0, replays restored +1\n") {
		t.Errorf("raw evidence:\n%s", s.Raw)
	}
	if !strings.Contains(strings.Join(s.Notes, "\n"), "Mount ID changed in 1 of 2 runs, the agent counted the death and the replay in 1 of 2") {
		t.Errorf("notes do not count the evidence:\n%s", strings.Join(s.Notes, "\n"))
	}
	var none Section
	e2eFigures(&none, &pluginBenchResult{}, time.Minute)
	if none.Rows != nil || none.Header != nil {
		t.Errorf("no runs: want no table, got %v %v", none.Header, none.Rows)
	}
}

func TestWriteLogAndFileSafe(t *testing.T) {
	o := &Options{Root: t.TempDir(), RawDir: "bench"}
	p, err := writeLog(o, "scale-agent-"+fileSafe("busy node (700 pods)")+".log", "line 1\nline 2\n")
	if err != nil {
		t.Fatal(err)
	}
	if p != filepath.Join("bench", "scale-agent-busy-node-700-pods-.log") && p != filepath.Join("bench", "scale-agent-busy-node-700-pods.log") {
		t.Errorf("path = %q", p)
	}
	if b, err := os.ReadFile(filepath.Join(o.Root, p)); err != nil || string(b) != "line 1\nline 2\n" {
		t.Errorf("file %s: %q %v", p, b, err)
	}
}
