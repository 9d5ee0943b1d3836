package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// hostReplay holds the lost-mount section's replay samples (the in-process plugin on the host),
// for the containerized plugin's section to stand beside; nil when that section did not run.
var hostReplay []time.Duration

// pluginBenchResult mirrors e2e/scenarios.PluginBenchResult (the e2e module's test package
// cannot be imported): every figure is timed from the plugin pod's delete request.
type pluginBenchResult struct {
	Layout       string           `json:"layout"`
	Driver       string           `json:"driver"`
	ExitMs       []float64        `json:"exitMs"`
	ReadableMs   []float64        `json:"readableMs"`
	RegisteredMs []float64        `json:"registeredMs"`
	Runs         []pluginBenchRun `json:"runs"`
	MountIDKind  string           `json:"mountIdKind"`
	SetupSeconds float64          `json:"setupSeconds"`
	GraceSeconds int64            `json:"graceSeconds"`
	Failures     []string         `json:"failures"`
	Window       []windowCase     `json:"window"`
	WindowWrites *windowWrites    `json:"windowWrites"`
}

// windowCase mirrors e2e/scenarios.WindowCase: one incident of the window matrix (issue 34).
type windowCase struct {
	Behaviour   string    `json:"behaviour"`
	Config      string    `json:"config"`
	Case        string    `json:"case"`
	DownSeconds float64   `json:"downSeconds"`
	Pods        int       `json:"pods"`
	WindowMs    []float64 `json:"windowMs"`
	// ContainerWindowMs: the same window read through each pod's container (what the
	// application sees, after the container remount); the row's figure when present.
	ContainerWindowMs []float64 `json:"containerWindowMs"`
	PodWindowMs       []float64 `json:"podWindowMs"`
	FailedReads       int       `json:"failedReads"`
	FailedWrites      int       `json:"failedWrites"`
	Reads             int       `json:"reads"`
	Writes            int       `json:"writes"`
	Daemons           int       `json:"daemons"`
	DaemonRSSKB       int       `json:"daemonRssKB"`
	DaemonsLeft       int       `json:"daemonsLeft"`
	PluginBackMs      float64   `json:"pluginBackMs"`
	SettledMs         float64   `json:"settledMs"`
}

// windowWrites mirrors e2e/scenarios.WindowWrites.
type windowWrites struct {
	Acknowledged int      `json:"acknowledged"`
	Lost         int      `json:"lost"`
	LostExamples []string `json:"lostExamples"`
}

// windowTarget is issue 34's bound on the window from a daemon's death to the pod reading again.
const windowTarget = 500 * time.Millisecond

// pluginBenchRun mirrors e2e/scenarios.PluginBenchRun: one run's evidence that the volume died
// and another mount stands in its place.
type pluginBenchRun struct {
	DeadPids      []int   `json:"deadPids"`
	LivePids      []int   `json:"livePids"`
	MountIDBefore uint64  `json:"mountIdBefore"`
	MountIDAfter  uint64  `json:"mountIdAfter"`
	DeadFound     float64 `json:"deadFound"`
	Restored      float64 `json:"restored"`
}

// e2eBenchName is the benchmark the section runs, in e2e/scenarios.
const e2eBenchName = "BenchmarkPluginPodDeleted"

func runE2EPlugin(ctx context.Context, o *Options) Section {
	s := Section{
		Title: "Agent, lost mount with the plugin in a container: plugin pod deleted, kept down, rolled → readable again",
		RanAgainst: "the e2e suite's single-node cluster (kube-apiserver, controller-manager, scheduler, kubelet " + KubeVersion +
			", containerd) with pvrescue installed from manifests/ (webhook Deployment, agent DaemonSet, shipped config), " +
			"a real S3 server (versitygw) and the test CSI plugin running as a DaemonSet pod with the mounts of k8s-csi-s3's " +
			"upstream node manifest (yandex layout: s3fs at kubelet's staging path, a bind per target, s3fs as the plugin's " +
			"child in its container). Run by `make bench` as e2e/scenarios' " + e2eBenchName + " (its own cluster, " +
			"brought up and torn down by it).",
	}
	if err := e2ePlugin(ctx, o, &s); err != nil {
		s.Err = err
	}
	return s
}

func e2ePlugin(ctx context.Context, o *Options, s *Section) error {
	run, err := runE2EBench(ctx, o, "e2e", "PVRESCUE_BENCH_WINDOW_PODS="+o.WindowPods, "PVRESCUE_BENCH_WINDOW_DOWN="+o.WindowDown.String())
	if err != nil {
		return err
	}
	if run.readErr == nil {
		e2eFigures(s, &run.r, run.took)
		s.Notes = append(s.Notes, windowSlowNotes(run.agentLog, &run.r)...)
	}
	return run.outcome(o, s)
}

// e2eRun is one run of the e2e benchmark: its result (read from the file it writes after every
// run and when it ends, failed or not), go test's output and where both are kept.
type e2eRun struct {
	r                 pluginBenchResult
	log               string
	logPath, agentLog string
	took              time.Duration
	runErr, readErr   error
}

// runE2EBench runs the e2e benchmark with env added to the bench's environment, keeping go
// test's output (<name>-go-test.log) and the agent's log of each incident
// (<name>-window-agent.log) in the raw directory.
func runE2EBench(ctx context.Context, o *Options, name string, env ...string) (*e2eRun, error) {
	if err := requireRoot(); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "pvrescue-bench-e2e-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // best effort: a temporary directory
	out := filepath.Join(tmp, "result.json")
	rawDir := o.RawDir
	if !filepath.IsAbs(rawDir) {
		rawDir = filepath.Join(o.Root, rawDir)
	}
	if err := os.MkdirAll(rawDir, 0o755); err != nil {
		return nil, err
	}
	run := &e2eRun{agentLog: filepath.Join(rawDir, name+"-window-agent.log")}
	if err := os.Remove(run.agentLog); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-tags", "e2e", "-run", "^$",
		"-bench", "^"+e2eBenchName+"$", "-benchtime", "1x", "-timeout", "40m", "./scenarios/")
	cmd.Dir = filepath.Join(o.Root, "e2e")
	cmd.Env = append(append(os.Environ(), "PVRESCUE_BENCH_OUT="+out, fmt.Sprintf("PVRESCUE_BENCH_REPEATS=%d", o.E2ERepeats),
		"PVRESCUE_BENCH_WINDOW_AGENT_LOG="+run.agentLog), env...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	started := time.Now()
	run.runErr = cmd.Run()
	run.took = time.Since(started)
	run.log = log.String()
	if run.logPath, err = writeLog(o, name+"-go-test.log", run.log); err != nil {
		return nil, errors.Join(fmt.Errorf("keep the output of go test -bench %s (in e2e/): %w", e2eBenchName, err), run.runErr)
	}
	b, err := os.ReadFile(out)
	if err == nil {
		err = json.Unmarshal(b, &run.r)
	}
	run.readErr = err
	return run, nil
}

// outcome adds where the logs are to s and says whether the benchmark failed.
func (run *e2eRun) outcome(o *Options, s *Section) error {
	if _, err := os.Stat(run.agentLog); err == nil {
		s.Notes = append(s.Notes, fmt.Sprintf("The agent's log of each window incident (its restore pass timings included): `%s`.",
			filepath.Join(o.RawDir, filepath.Base(run.agentLog))))
	}
	if run.runErr != nil {
		return errors.New(e2eFailure(run.runErr, run.readErr, &run.r, o.E2ERepeats, run.log, run.logPath))
	}
	if run.readErr != nil {
		return fmt.Errorf("%s passed but its result is unreadable: %w (whole output: %s)", e2eBenchName, run.readErr, run.logPath)
	}
	s.Notes = append(s.Notes, fmt.Sprintf("go test's whole output: `%s`.", run.logPath))
	return nil
}

// e2eFailure says what failed in the e2e benchmark, first: its first failure message (from its
// result file, else from go test's output) and how many runs it had measured, then go test's
// failure lines (GoTestFailure: the failing messages with the runs' logs, log dumps reduced to
// their first line), then where go test's whole output is.
func e2eFailure(runErr, readErr error, r *pluginBenchResult, repeats int, out, logPath string) string {
	lines := GoTestFailure(out)
	what := ""
	if readErr == nil && len(r.Failures) > 0 {
		what, _, _ = strings.Cut(r.Failures[0], "\n")
		if n := len(r.Failures); n > 1 {
			what += fmt.Sprintf(" (and %d more failure(s), below)", n-1)
		}
	} else {
		what = goTestHeadline(lines)
		if what == "" {
			what = runErr.Error()
		}
	}
	runs := "no result file"
	if readErr == nil {
		runs = fmt.Sprintf("%d of %d runs measured", len(r.ReadableMs), repeats)
	}
	head := fmt.Sprintf("%s (e2e/scenarios, go test %v; %s): %s", e2eBenchName, runErr, runs, what)
	return failureText(head, lines, logPath)
}

// e2eFigures fills the section's table, notes and raw samples from the benchmark's result (all
// of it, or the runs before a failure).
func e2eFigures(s *Section, r *pluginBenchResult, took time.Duration) {
	toDur := func(ms []float64) []time.Duration {
		ds := make([]time.Duration, len(ms))
		for i, m := range ms {
			ds[i] = time.Duration(m * float64(time.Millisecond))
		}
		return ds
	}
	readable, exit, registered := toDur(r.ReadableMs), toDur(r.ExitMs), toDur(r.RegisteredMs)
	var outage []time.Duration
	for i := range min(len(readable), len(exit)) {
		outage = append(outage, readable[i]-exit[i])
	}
	s.Raw = RawSamples([]string{"containerized-readable", "containerized-exit", "containerized-outage", "containerized-registered", "host-replay"},
		map[string][]time.Duration{"containerized-readable": readable, "containerized-exit": exit, "containerized-outage": outage,
			"containerized-registered": registered, "host-replay": hostReplay}) + e2eEvidence(r)
	if len(readable) == 0 {
		return
	}
	s.Header = []string{"figure (timed from: the first rows the delete request, window rows the death)", "samples", "p50", "p99", "max", "p50 / p99 ratio to the host plugin's replay; window rows: the incident's costs"}
	ratio := func(xs []time.Duration) string {
		if len(hostReplay) == 0 {
			return "— (lost-mount section not run)"
		}
		return Ratio(float64(Percentile(xs, 50)), float64(Percentile(hostReplay, 50))) + " / " + Ratio(float64(Percentile(xs, 99)), float64(Percentile(hostReplay, 99)))
	}
	row := func(name string, xs []time.Duration, withRatio bool) []string {
		rt := "—"
		if withRatio {
			rt = ratio(xs)
		}
		return []string{name, fmt.Sprint(len(xs)), Ms(Percentile(xs, 50)), Ms(Percentile(xs, 99)), Ms(Percentile(xs, 100)), rt}
	}
	s.Rows = [][]string{
		row("containerized plugin: pod deleted → the node's target reads the file again", readable, true),
		row("  of which: pod deleted → the volume's s3fs exited (the volume dead)", exit, false),
		row("  the outage: the volume's s3fs exited → the target reads the file again", outage, true),
		row("  for comparison: pod deleted → the DaemonSet's new plugin pod ready", registered, false),
	}
	if len(hostReplay) > 0 {
		s.Rows = append(s.Rows, row("host plugin (lost-mount section, this run): plugin restarted → readable", hostReplay, true))
	}
	windowRows(s, r)
	kind := map[string]string{"unique": "statx STATX_MNT_ID_UNIQUE, never reused", "reusable": "statx STATX_MNT_ID; this kernel has no unique mount ID, so an ID could come back"}[r.MountIDKind]
	if kind == "" {
		kind = "statx, kind " + r.MountIDKind
	}
	s.Notes = append(s.Notes,
		fmt.Sprintf("Each run of the first rows deletes the plugin's pod (grace period %d s); those rows are timed from the delete request. The FUSE daemons in the plugin's container (its processes holding /dev/fuse: the s3fs serving the volume, the only volume of this plugin instance) are watched by pidfds opened before the deletion: \"exited\" is when the last of them exited, the instant the volume died (a pidfd cannot miss it, however soon the rescue follows). From then `<pod target>/app.txt` is read on the node every 10 ms: \"reads again\" is the first read that gives the file back (the plugin does not answer, so the agent bridges at once with its own s3fs, s3.driverDownBridgeAfter 0; when the DaemonSet's new pod registers, the agent replays NodeStageVolume/NodePublishVolume through it and puts the driver's new mounts beneath its bridge bind at the target, which is then detached — the hand-back —, as the agent deployed from manifests/ does on this kernel with its container remounter on; the next run waits for the hand-back); the outage is the difference, per run. The next run starts 1 s after the new plugin pod is ready.", r.GraceSeconds),
		fmt.Sprintf("Evidence that each run's volume died and was put back, none of it racing the rescue: the old s3fs exited (pidfd), the mount at the target after the rescue is another one (mount ID, %s, differs from the one before the deletion), and the agent counted it (its pvrescue_s3_dead_mounts_found_total and pvrescue_s3_restores_total{method=\"replay\" or \"bridge\",result=\"success\"} each rose by at least 1, read on its /metrics). %s", kind, evidenceSummary(r)),
		"The containerized figure includes what the host plugin's does not: the pod's termination, the DaemonSet controller creating a new pod, kubelet starting its sandbox and two containers, and the registrar registering the plugin again. The ratio says how much of the user-visible outage is the plugin's own restart rather than the agent.",
		fmt.Sprintf("Cluster bring-up and pvrescue install (no cert-manager: package certs makes the webhook's certificate) took %s of the section's %s.", time.Duration(r.SetupSeconds*float64(time.Second)).Round(time.Second), took.Round(time.Second)))
}

// evidenceSummary sums the runs' evidence up in one sentence.
func evidenceSummary(r *pluginBenchResult) string {
	changed, counted := 0, 0
	for _, run := range r.Runs {
		if run.MountIDAfter != run.MountIDBefore {
			changed++
		}
		if run.DeadFound >= 1 && run.Restored >= 1 {
			counted++
		}
	}
	return fmt.Sprintf("Mount ID changed in %d of %d runs, the agent counted the death and the replay in %d of %d (each run's pids, IDs and counts in the raw file).", changed, len(r.Runs), counted, len(r.Runs))
}

// e2eEvidence renders each run's evidence, one line per run, for the raw file.
func e2eEvidence(r *pluginBenchResult) string {
	var b strings.Builder
	for i, run := range r.Runs {
		fmt.Fprintf(&b, "run %d: s3fs %v exited; s3fs %v serve after; mount ID (%s) %d → %d; agent: dead mounts found +%v, replays restored +%v\n",
			i, run.DeadPids, run.LivePids, r.MountIDKind, run.MountIDBefore, run.MountIDAfter, run.DeadFound, run.Restored)
	}
	return b.String()
}

// windowRows adds the window matrix (issue 34) to the section: per behaviour, way the plugin
// goes away and pod count, the window from the death to each pod's target reading again, the
// pods' failed operations, the agent's daemons; then the server-side check of the writes.
func windowRows(s *Section, r *pluginBenchResult) {
	if len(r.Window) == 0 {
		return
	}
	what := map[string]string{"deleted": "plugin pod deleted", "down": "plugin kept down", "rolled": "plugin DaemonSet rolled (rollout restart)"}
	toDur := func(ms []float64) []time.Duration {
		ds := make([]time.Duration, len(ms))
		for i, m := range ms {
			ds[i] = time.Duration(m * float64(time.Millisecond))
		}
		return ds
	}
	var raw strings.Builder
	// Incidents of one cell (behaviour, case, pods) are pooled into its row; a row of one incident
	// says n = 1: its percentiles are over the pods of that incident, not over incidents.
	for _, c := range r.Window {
		fmt.Fprintf(&raw, "window %s %s %d pods: windowMs %v containerWindowMs %v podWindowMs %v\n", c.Behaviour, c.Case, c.Pods, c.WindowMs, c.ContainerWindowMs, c.PodWindowMs)
	}
	cells, incidents := poolWindowCells(r.Window)
	for i, c := range cells {
		n := incidents[i]
		w, host := toDur(c.WindowMs), ""
		reads := "the pod's target reads the file"
		if len(c.ContainerWindowMs) > 0 {
			// What the application sees: its container's mount, after the remount.
			host = fmt.Sprintf("the pods' targets on the node read again: p50 %s / p99 %s / max %s; ",
				Ms(Percentile(w, 50)), Ms(Percentile(w, 99)), Ms(Percentile(w, 100)))
			w = toDur(c.ContainerWindowMs)
			reads = "the file reads in the pod's container"
		}
		name := what[c.Case]
		if c.Case == "down" {
			name += fmt.Sprintf(" %.0f s", c.DownSeconds)
		}
		of := fmt.Sprintf("%d incidents", n)
		if n == 1 {
			of = "1 incident, n = 1: p50 and p99 over its pods, not over incidents"
		}
		verdict := ""
		if c.Behaviour == "shipped" {
			verdict = "; p99 ≤ 500 ms: " + Verdict(Percentile(w, 99).Seconds(), windowTarget.Seconds(), "s") + " (" + of + ")"
		}
		pod := "—"
		if len(c.PodWindowMs) > 0 {
			pw := toDur(c.PodWindowMs)
			pod = fmt.Sprintf("p50 %s / max %s (%d pods saw a failure)", Ms(Percentile(pw, 50)), Ms(Percentile(pw, 100)), len(pw))
		}
		s.Rows = append(s.Rows, []string{
			fmt.Sprintf("window, %s, %d pod(s), %s: the last plugin s3fs exited → %s", c.Behaviour, c.Pods, name, reads),
			fmt.Sprintf("%d (%s)", len(w), of), Ms(Percentile(w, 50)), Ms(Percentile(w, 99)), Ms(Percentile(w, 100)),
			host + fmt.Sprintf("failed ops (all pods): reads %d of ≈%d, writes %d of %d; in the pods, death → first good read after a failure: %s; agent s3fs started: %d (max RSS %d kB; %d still running when settled); plugin back %s, every target on the driver's mount %s after the death%s",
				c.FailedReads, c.Reads, c.FailedWrites, c.Writes, pod, c.Daemons, c.DaemonRSSKB, c.DaemonsLeft,
				Ms(time.Duration(c.PluginBackMs*float64(time.Millisecond))), Ms(time.Duration(c.SettledMs*float64(time.Millisecond))), verdict),
		})
	}
	s.Raw += raw.String()
	configs := map[string]string{}
	for _, c := range r.Window {
		configs[c.Behaviour] = c.Config
	}
	s.Notes = append(s.Notes, fmt.Sprintf("Window rows (issue 34): the incidents of a cell pooled in its row (the samples column says how many; with one, n = 1), on the same cluster and PV (yandex layout) after the runs above; \"shipped\" is %s, \"baseline\" %s (the agent pod replaced after its ConfigMap changed; measured in the same run). Each row is timed from the death: the instant the last s3fs of the plugin's container exited (pidfd). From then each load pod's file is read every 10 ms, through its container (/proc/<the container's init>/root/data/app.txt: its own mount namespace, what the application sees once the agent remounted it there; the row's figures and verdict) and at its target on the node (the detail column), until it gives the file back (the window, one sample per pod). Load: each pod (busybox) reads app.txt every 200 ms with the shell's read built-in and every fifth round appends a line to its own object with dd conv=fsync (an acknowledged write reached S3: s3fs uploads on fsync); failures come from the pods' own logs (CRI timestamps) from the incident's start until every target is on the driver's mount again plus 1 s; reads attempted are estimated from the 200 ms period. The \"kept down\" case restarts the plugin DownSeconds after the death. Pods: the load pods only (the benchmark's app pod also mounts the PV).", configs["shipped"], configs["baseline"]))
	if w := r.WindowWrites; w != nil {
		s.Notes = append(s.Notes, fmt.Sprintf("Acknowledged writes across every incident (bridge and hand-back included), checked on the S3 server's side (versitygw's directory, no mount): %d acknowledged, %d missing%s.", w.Acknowledged, w.Lost, map[bool]string{true: fmt.Sprintf(", e.g. %v", w.LostExamples), false: ""}[w.Lost > 0]))
	}
}

// poolWindowCells merges the incidents of each cell (behaviour, case, time down, pods) in the
// order the cells first ran: samples concatenated, counts added, times the worst. It returns the
// cells and how many incidents each pools.
func poolWindowCells(cases []windowCase) ([]windowCase, []int) {
	type key struct {
		behaviour, kase string
		down            float64
		pods            int
	}
	var out []windowCase
	var n []int
	at := map[key]int{}
	for _, c := range cases {
		k := key{c.Behaviour, c.Case, c.DownSeconds, c.Pods}
		i, ok := at[k]
		if !ok {
			at[k] = len(out)
			out = append(out, c)
			n = append(n, 1)
			continue
		}
		p := &out[i]
		n[i]++
		p.WindowMs = append(append([]float64(nil), p.WindowMs...), c.WindowMs...)
		p.ContainerWindowMs = append(append([]float64(nil), p.ContainerWindowMs...), c.ContainerWindowMs...)
		p.PodWindowMs = append(append([]float64(nil), p.PodWindowMs...), c.PodWindowMs...)
		p.FailedReads += c.FailedReads
		p.FailedWrites += c.FailedWrites
		p.Reads += c.Reads
		p.Writes += c.Writes
		p.Daemons += c.Daemons
		p.DaemonRSSKB = max(p.DaemonRSSKB, c.DaemonRSSKB)
		p.DaemonsLeft += c.DaemonsLeft
		p.PluginBackMs = max(p.PluginBackMs, c.PluginBackMs)
		p.SettledMs = max(p.SettledMs, c.SettledMs)
	}
	return out, n
}
