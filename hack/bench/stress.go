package main

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// stressTarget is issue 54's bound on every lost-mount incident of the host rig: none may be
// left to the periodic check (s3.checkInterval, 1 min).
const stressTarget = time.Second

// stressMaxDephase bounds the random wait before each stress incident. The lost-mount section
// waits up to 2 s so that its losses fall at random points of the 1 s pending check; here the
// point is the tail over many incidents, and a death shortly after the last incident's passes
// (what lost a wake before) is the case to hit often.
const stressMaxDephase = 300 * time.Millisecond

// stressKind is one kind of incident: loss kills the driver's daemons; after, when set, runs
// once the target is readable again (the hand-back of a kept-down plugin), timed on its own.
type stressKind struct {
	name  string
	loss  func(r *s3Rig) error
	after func(ctx context.Context, r *s3Rig) error
	// lossSeesDead: loss itself waits until the targets are dead (after its first kill); the
	// incident is timed from that kill all the same.
	lossSeesDead bool
}

func stressKinds() []stressKind {
	return []stressKind{
		{name: "restarted", loss: (*s3Rig).restartPlugin},
		{name: "kept down", loss: func(r *s3Rig) error { r.killDriverDaemons(); r.stopPlugin(); return nil },
			after: func(ctx context.Context, r *s3Rig) error {
				if err := r.startPlugin(); err != nil {
					return err
				}
				return waitHandedBack(ctx, r)
			}},
		// A rollout of the plugin's DaemonSet: the old pod's processes die and its socket goes;
		// the new pod serves after its start-up, a random wait in [0, stressRollStart). The agent
		// bridges (the driver does not answer) or, when the new plugin came first, replays; a
		// bridge is handed back once the new plugin answers (after, timed on its own).
		{name: "rolled", loss: func(r *s3Rig) error {
			r.killDriverDaemons()
			r.stopPlugin()
			started := make(chan error, 1)
			r.rollIn = started
			go func() {
				time.Sleep(time.Duration(rand.Int64N(int64(stressRollStart))))
				started <- r.startPlugin()
			}()
			return nil
		}, after: func(ctx context.Context, r *s3Rig) error {
			if err := <-r.rollIn; err != nil {
				return fmt.Errorf("the new plugin did not start: %w", err)
			}
			return waitHandedBack(ctx, r)
		}},
		// A plugin in a crash loop: restarted again a moment after the first restart, while the
		// agent may still be replaying through it (its new daemon killed just after it appeared,
		// or the replay's call cut off). Timed from the first kill: the window the pod sees. The
		// second restart may find the target bridged (the plugin went away under the replay)
		// and so not die again.
		{name: "restarted twice", lossSeesDead: true, loss: func(r *s3Rig) error {
			devs := r.targetDevs()
			if err := r.restartPlugin(); err != nil {
				return err
			}
			if err := r.waitDead(context.Background(), devs); err != nil {
				return fmt.Errorf("mount not dead after the first kill: %w", err)
			}
			time.Sleep(time.Duration(rand.Int64N(int64(200 * time.Millisecond))))
			return r.restartPlugin()
		}},
	}
}

const stressBefore = "written before\n"

// stressRollStart bounds the new plugin's start-up in a "rolled" incident.
const stressRollStart = time.Second

// waitHandedBack waits until the targets are on the driver's mounts again, readable, with the
// bridge's s3fs gone and the plugin serving: the hand-back of a plugin that came back.
func waitHandedBack(ctx context.Context, r *s3Rig) error {
	staging := filepath.Join(r.state, "s3", "staging", r.names.pv)
	return testenv.WaitUntil(ctx, restoreTimeout, benchPoll, func() bool {
		return r.onDriver() && r.allRead("before.txt", stressBefore) &&
			len(testenv.S3fsPIDs(staging)) == 0 && len(r.plugin.Pids()) > 0
	})
}

// runStress is the on-demand stress mode (issue 54): many incidents of each kind on the host rig
// with the machine loaded, reporting the tail (p99.9, max) and, for every incident over
// stressTarget, the agent's log between the loss and the first good read.
func runStress(ctx context.Context, o *Options) Section {
	s := Section{
		Title: "Stress (on demand): lost-mount incidents of the host rig, tail",
		RanAgainst: "the lost-mount section's host rig (the agent's S3 rescue with fusewatch and the container remounter, real s3fs, " +
			"a real S3 server, the objects in a real kube-apiserver " + KubeVersion + "), one pod and then several on one PV, with busy loops beside it.",
	}
	if err := stress(ctx, o, &s); err != nil {
		s.Err = err
	}
	return s
}

func stress(ctx context.Context, o *Options, s *Section) error {
	// Thousands of incidents log tens of megabytes: kept outside the repository (the report
	// quotes what it needs of it).
	ro, logPath, err := o.agentLogOr(filepath.Join(os.TempDir(), "pvrescue-bench-stress-agent.log"))
	if err != nil {
		return err
	}
	stopBusy, err := startBusyLoops(o.StressBusy)
	if err != nil {
		return err
	}
	defer stopBusy()

	samples := map[string][]time.Duration{}
	var names, slow []string
	var cfgInterval time.Duration
	for _, pods := range []int{1, o.StressPods} {
		rigName := fmt.Sprintf("%d pod", pods)
		if pods > 1 {
			rigName += "s"
		}
		for _, k := range stressKinds() {
			names = append(names, rigName+", "+k.name)
			if k.after != nil {
				names = append(names, rigName+", "+k.name+": hand-back")
			}
		}
		interval, err := stressRig(ctx, ro, pods, rigName, samples, &slow)
		if err != nil {
			return fmt.Errorf("%s: %w", rigName, err)
		}
		cfgInterval = interval
	}

	s.Raw = RawSamples(names, samples)
	s.Header = []string{"incident", "samples", "p50", "p99", "p99.9", "max", "over 1 s", "target"}
	for _, n := range names {
		xs := samples[n]
		over := 0
		for _, x := range xs {
			if x > stressTarget {
				over++
			}
		}
		target := "—"
		if !strings.HasSuffix(n, "hand-back") {
			target = "max ≤ 1 s: " + Verdict(Percentile(xs, 100).Seconds(), stressTarget.Seconds()+1e-9, "s")
		}
		s.Rows = append(s.Rows, []string{n + " → file readable", fmt.Sprint(len(xs)), Ms(Percentile(xs, 50)), Ms(Percentile(xs, 99)),
			Ms(Percentile(xs, 99.9)), Ms(Percentile(xs, 100)), fmt.Sprint(over), target})
	}
	s.Notes = append(s.Notes,
		fmt.Sprintf("%d rounds; each round runs one incident of every kind, each after a random wait in [0, %s). \"restarted\": every s3fs of the driver SIGKILLed and a new plugin serves the socket at once (the agent replays through it); \"kept down\": the same, but the plugin stops serving (the agent bridges with its own s3fs), then it serves again and the agent hands the volume back (timed on its own, until the bridge's s3fs has exited); \"rolled\": the plugin's DaemonSet rolled out, the driver's s3fs killed and the plugin stopped, a new plugin serving after a random start-up in [0, %s) (the agent bridges or, when the new plugin came first, replays; a bridge is handed back, timed on its own from the first good read, so it includes the rest of the new plugin's start-up; hand-back rows have no target); \"restarted twice\": a restart, the target seen dead, then another restart after a random wait in [0, 200 ms) — the second kills the daemon the agent's replay may have just made, or cuts the replay's call off (a plugin in a crash loop); timed from the first kill. Timed from the kill to the first good read of a file written before the loss, polled every %s.", o.StressRepeats, stressMaxDephase, stressRollStart, benchPoll),
		fmt.Sprintf("Load: %d busy loops (sh) beside the rig for the whole run, as the reproduction of issue 54 ran. Shipped configuration (s3.checkInterval %s), except s3.bridgeFlapLimit 0 (the rig's incidents come faster than the flap window). Several pods: %d pods on the one claim, each target first published by an s3fs of its own; an incident ends when every target reads back.", o.StressBusy, cfgInterval, o.StressPods),
		fmt.Sprintf("The agent's log (V(1), with the bench's marks): `%s`.", logPath))
	if len(slow) == 0 {
		s.Notes = append(s.Notes, "No incident took over 1 s.")
	}
	for _, sl := range slow {
		kind, run, _ := strings.Cut(sl, " run ")
		run, _, _ = strings.Cut(run, ":")
		s.Notes = append(s.Notes, fmt.Sprintf("Over 1 s: %s. The agent's log from the loss to the first good read:\n\n~~~text\n%s\n~~~", sl, logExcerpt(logPath, lossMarks, kind, run, 40)))
	}
	return nil
}

// incidentMarks are the bench's log messages that open and close one timed incident.
type incidentMarks struct{ start, end string }

var (
	lossMarks     = incidentMarks{"bench: loss", "bench: readable again"}
	handBackMarks = incidentMarks{"bench: starting the plugin again (hand-back)", "bench: target on the driver's mount, readable"}
)

// logExcerpt returns the agent log's lines from the bench's start mark of kind and run to its
// end mark (at most max lines, the first and last kept).
func logExcerpt(path string, marks incidentMarks, kind, run string, max int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(log unreadable: " + err.Error() + ")"
	}
	defer func() { _ = f.Close() }()
	mark := fmt.Sprintf("\"kind\"=%q \"run\"=%s", kind, run)
	var lines []string
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		marked := strings.Contains(l+" ", mark+" ") // "run"=1 is not "run"=17
		if !in && strings.Contains(l, marks.start) && marked {
			in = true
		}
		if in {
			lines = append(lines, l)
			if strings.Contains(l, marks.end) && marked {
				break
			}
		}
	}
	if len(lines) == 0 {
		return "(no lines between the marks)"
	}
	if len(lines) > max {
		cut := len(lines) - max
		lines = append(append(lines[:max/2:max/2], fmt.Sprintf("… %d lines …", cut)), lines[len(lines)-max/2:]...)
	}
	return strings.Join(lines, "\n")
}

// agentLogOr returns a copy of o whose S3 rigs log to -agent-log, or to def (emptied first)
// when that is not set, and the log's path.
func (o *Options) agentLogOr(def string) (*Options, string, error) {
	c := *o
	if c.AgentLog == "" {
		if err := os.MkdirAll(filepath.Dir(def), 0o755); err != nil {
			return nil, "", err
		}
		if err := os.Truncate(def, 0); err != nil && !os.IsNotExist(err) {
			return nil, "", err
		}
		c.AgentLog = def
	}
	return &c, c.AgentLog, nil
}

// startBusyLoops starts n shell busy loops (the load of issue 54's reproduction); stop kills them.
func startBusyLoops(n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("busy loop: %w", err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

// stressReportFile is where the stress section's report is committed (`make bench-stress`).
const stressReportFile = "stress.md"

// committedAppendix returns the committed reports of the on-demand sections (stress, then
// ablation), each as committedReport renders it.
func committedAppendix(o *Options) (string, error) {
	var parts []string
	for _, f := range []struct{ file, what string }{{stressReportFile, "the stress run"}, {ablationReportFile, "the ablation run"}} {
		a, err := committedReport(o, f.file, f.what)
		if err != nil {
			return "", err
		}
		if a != "" {
			parts = append(parts, a)
		}
	}
	return strings.Join(parts, "\n"), nil
}

// committedReport returns a committed on-demand report (in the raw dir) as an appendix for
// BENCHMARKS.md: its sections, under a heading that says they come from another run. Empty when
// there is none.
func committedReport(o *Options, file, what string) (string, error) {
	dir := o.RawDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(o.Root, dir)
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	text := string(b)
	_, gen, _ := strings.Cut(text, "Generated by ")
	gen, _, _ = strings.Cut(gen, ";")
	i := strings.Index(text, "\n## ")
	if i < 0 {
		return "", nil
	}
	body := strings.ReplaceAll(text[i+1:], "\n## ", "\n### ")
	body = strings.Replace(body, "## ", "### ", 1)
	return fmt.Sprintf("## On demand: %s (not re-run by make bench)\n\nFrom `%s/%s`, generated by %s; not measured in this run.\n\n%s",
		what, o.RawDir, file, gen, body), nil
}

// refreshAppendix replaces the on-demand appendix of the report at path (everything from its
// first "## On demand:" heading) with the committed reports, leaving the sections make bench
// measured as they are: `make bench-ablation` and `make bench-stress` show their new result
// there without a whole make bench.
func refreshAppendix(o *Options, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(b)
	if i := strings.Index(text, "\n## On demand: "); i >= 0 {
		text = text[:i+1]
	}
	app, err := committedAppendix(o)
	if err != nil {
		return err
	}
	if app != "" {
		text = strings.TrimRight(text, "\n") + "\n\n" + app
	}
	return os.WriteFile(path, []byte(text), 0o644) //nolint:gosec // path is the -refresh-appendix flag of whoever runs the bench (make bench-ablation: BENCHMARKS.md)
}

// stressRig runs o.StressRepeats rounds on a rig of pods pods, adding each incident's time to
// samples under "<rigName>, <kind>" and the slow ones to slow; it returns the rig's
// s3.checkInterval.
func stressRig(ctx context.Context, o *Options, pods int, rigName string, samples map[string][]time.Duration, slow *[]string) (time.Duration, error) {
	r, err := newS3Rig(ctx, o, s3RigOptions{names: newS3Names(fmt.Sprintf("bench-stress-%d", pods)), pods: pods,
		pod:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		files: map[string]string{"before.txt": stressBefore}, remounter: shippedRemounter})
	if err != nil {
		return 0, err
	}
	defer func() { r.close() }()
	readable := func() bool { return r.allRead("before.txt", stressBefore) }
	staging := filepath.Join(r.state, "s3", "staging", r.names.pv)
	start := time.Now()
	for i := 0; i < o.StressRepeats; i++ {
		for _, k := range stressKinds() {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			name := rigName + ", " + k.name
			time.Sleep(time.Duration(rand.Int64N(int64(stressMaxDephase))))
			r.log.Info("bench: loss", "kind", name, "run", i)
			devs := r.targetDevs()
			t0 := time.Now()
			if err := k.loss(r); err != nil {
				return 0, fmt.Errorf("%s run %d: %w", k.name, i, err)
			}
			if !k.lossSeesDead {
				if err := r.waitDead(ctx, devs); err != nil {
					return 0, fmt.Errorf("%s run %d: mount not dead after the kill: %w", k.name, i, err)
				}
			}
			if err := testenv.WaitUntil(ctx, restoreTimeout, benchPoll, readable); err != nil {
				return 0, fmt.Errorf("%s run %d: targets not readable again within %s: %w", k.name, i, restoreTimeout, err)
			}
			d := time.Since(t0)
			r.log.Info("bench: readable again", "kind", name, "run", i, "after", d)
			samples[name] = append(samples[name], d)
			if d > stressTarget {
				*slow = append(*slow, fmt.Sprintf("%s run %d: %s", name, i, Ms(d)))
			}
			if k.after != nil {
				t1 := time.Now()
				if err := k.after(ctx, r); err != nil {
					return 0, fmt.Errorf("%s run %d, after: %w", k.name, i, err)
				}
				d := time.Since(t1)
				r.log.Info("bench: handed back", "kind", name, "run", i, "after", d)
				samples[name+": hand-back"] = append(samples[name+": hand-back"], d)
			}
			// The next incident starts from the driver's mounts with no bridge left (a pass
			// that fell between two plugins bridged, and hands back once the plugin answers).
			if err := testenv.WaitUntil(ctx, restoreTimeout, benchPoll, func() bool {
				return r.onDriver() && readable() && len(testenv.S3fsPIDs(staging)) == 0
			}); err != nil {
				return 0, fmt.Errorf("%s run %d: not back on the driver's mounts with no bridge within %s: %w", k.name, i, restoreTimeout, err)
			}
		}
		if (i+1)%50 == 0 {
			fmt.Fprintf(os.Stderr, "   stress (%s): %d/%d rounds in %s\n", rigName, i+1, o.StressRepeats, time.Since(start).Round(time.Second))
		}
	}
	return r.cfg.S3.CheckInterval.Duration, nil
}
