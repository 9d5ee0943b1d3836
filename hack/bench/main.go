// Command bench measures pvrescue against floors and baselines taken in the same run and writes
// BENCHMARKS.md (see issue 8). It needs root for the loop-device and s3fs sections and the
// binaries `make bench` builds first.
//
//	go run ./hack/bench -out BENCHMARKS.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// Options of one benchmark run.
type Options struct {
	// Out is the Markdown report; RawDir receives raw outputs (go test -bench text for benchstat).
	Out, RawDir string
	// Root is the repository root (bin/, go.mod).
	Root string
	// Only lists sections to run (comma-separated names); empty runs all.
	Only string
	// WebhookDuration is the steady-state length of one rate step per handler; Rates are
	// requests/s. The step at the target rate (200/s) runs WebhookTargetDuration: its p99 is the
	// target, and one stall of the machine (one run here lost ~120 ms at once: 24 samples at
	// 200/s) is over 1 % of a 10 s step's samples but 0.4 % of a 30 s one's.
	WebhookDuration       time.Duration
	WebhookTargetDuration time.Duration
	// WebhookBlock is one turn of a handler: the three take turns block by block.
	WebhookBlock time.Duration
	Rates        []int
	// BenchCount is go test -count for the Go benchmarks.
	BenchCount int
	// Repeats of the helper process runs, the lost-disk and the lost-mount runs.
	HelperRepeats, DiskRepeats, MountRepeats int
	// E2ERepeats are the containerized plugin's pod deletions (section e2e).
	E2ERepeats int
	// WindowPods are the pod counts of the e2e section's window matrix (comma-separated; "0"
	// skips it); WindowDown how long its "kept down" case keeps the plugin down.
	WindowPods string
	WindowDown time.Duration
	// DetectRepeats are the lost-mount section's detection runs (periodic check at 1 h).
	DetectRepeats int
	// ContainersRepeats are the losses of each agent (replace, stacking) of the containers section.
	ContainersRepeats int
	// ScaleSample is how long the idle agent is sampled.
	ScaleSample time.Duration
	// ScaleOthers is how many PVs (and as many PVCs) of other nodes the scale section adds.
	ScaleOthers int
	// AgentLog, when set, is a file that receives the S3 rigs' agent log (verbosity 1, with
	// timestamps) and the bench's own marks, to find out where a slow sample went.
	AgentLog string
	// StressRepeats and StressBusy: rounds of the on-demand stress section (one incident of
	// each kind a round) and the busy loops beside it.
	StressRepeats, StressBusy, StressPods int
	// The on-demand ablation section (issue 52, on the e2e section's cluster): pod counts,
	// rounds (each variant once, the shipped agent twice a round), and the mechanisms to switch
	// off (comma-separated; empty: all).
	AblationPods     string
	AblationRepeats  int
	AblationVariants string
	// RefreshAppendix, when set, is a report (BENCHMARKS.md) whose on-demand appendix is
	// replaced by the committed on-demand reports; nothing is measured.
	RefreshAppendix string
}

// NewOptions returns the defaults of `make bench`: about 30 minutes on 2 cores, most of it the
// e2e section (its own cluster; the window matrix at 1, 20 and 100 pods, as issue 34 asks).
func NewOptions() *Options {
	wd, _ := os.Getwd()
	return &Options{
		Out: "BENCHMARKS.md", RawDir: "bench", Root: wd,
		WebhookDuration: 10 * time.Second, WebhookTargetDuration: 30 * time.Second, WebhookBlock: 2 * time.Second, Rates: []int{50, 200, 500},
		BenchCount: 6, HelperRepeats: 20, DiskRepeats: 20, MountRepeats: 10, DetectRepeats: 20, E2ERepeats: 8, ContainersRepeats: 20,
		WindowPods: "1,20,100", WindowDown: 30 * time.Second,
		ScaleSample: 20 * time.Second, ScaleOthers: 50000,
		StressRepeats: 500, StressBusy: 2, StressPods: 5,
		AblationPods: "20,100", AblationRepeats: 3,
	}
}

// AddFlags registers the options.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Out, "out", o.Out, "Markdown report to write")
	fs.StringVar(&o.RawDir, "raw", o.RawDir, "directory for raw outputs (benchstat input)")
	fs.StringVar(&o.Root, "root", o.Root, "repository root")
	fs.StringVar(&o.Only, "only", o.Only, "comma-separated sections to run: "+strings.Join(sectionNames(), ","))
	fs.DurationVar(&o.WebhookDuration, "webhook-duration", o.WebhookDuration, "steady-state duration of each webhook rate step, per handler")
	fs.DurationVar(&o.WebhookTargetDuration, "webhook-target-duration", o.WebhookTargetDuration, "steady-state duration of the webhook's 200/s step (the target's), per handler")
	fs.DurationVar(&o.WebhookBlock, "webhook-block", o.WebhookBlock, "one turn of a webhook handler: the handlers take turns block by block")
	fs.IntVar(&o.BenchCount, "count", o.BenchCount, "go test -count for the Go benchmarks")
	fs.IntVar(&o.HelperRepeats, "helper-repeats", o.HelperRepeats, "process runs per helper figure")
	fs.IntVar(&o.DiskRepeats, "disk-repeats", o.DiskRepeats, "lost-disk runs")
	fs.IntVar(&o.MountRepeats, "mount-repeats", o.MountRepeats, "lost-mount runs")
	fs.IntVar(&o.E2ERepeats, "e2e-repeats", o.E2ERepeats, "plugin pod deletions of the e2e section")
	fs.StringVar(&o.WindowPods, "window-pods", o.WindowPods, "pod counts of the e2e section's window matrix (comma-separated; 0 skips it)")
	fs.DurationVar(&o.WindowDown, "window-down", o.WindowDown, "how long the e2e section's window matrix keeps the plugin down")
	fs.IntVar(&o.DetectRepeats, "detect-repeats", o.DetectRepeats, "detection runs of the lost-mount section")
	fs.IntVar(&o.ContainersRepeats, "containers-repeats", o.ContainersRepeats, "losses of each agent (replace, stacking; alternating) of the containers section")
	fs.DurationVar(&o.ScaleSample, "scale-sample", o.ScaleSample, "how long the idle agent is sampled")
	fs.IntVar(&o.ScaleOthers, "scale-others", o.ScaleOthers, "PVs (and as many PVCs) bound to other nodes added for the agent-at-cluster-scale run")
	fs.IntVar(&o.StressRepeats, "stress-repeats", o.StressRepeats, "rounds of the on-demand stress section (-only stress): one incident of each kind a round")
	fs.IntVar(&o.StressBusy, "stress-busy", o.StressBusy, "busy loops beside the stress section")
	fs.IntVar(&o.StressPods, "stress-pods", o.StressPods, "pods on the claim of the stress section's second rig (the first has one)")
	fs.StringVar(&o.AblationPods, "ablation-pods", o.AblationPods, "pod counts of the on-demand ablation section (-only ablation), comma-separated")
	fs.IntVar(&o.AblationRepeats, "ablation-repeats", o.AblationRepeats, "rounds of the ablation section per pod count: each switched-off mechanism once, the shipped agent twice (each turn: a plugin pod deleted and a DaemonSet rolled)")
	fs.StringVar(&o.AblationVariants, "ablation-variants", o.AblationVariants, "mechanisms the ablation section switches off, comma-separated (empty: all): "+strings.Join(ablationNames(), ","))
	fs.StringVar(&o.RefreshAppendix, "refresh-appendix", o.RefreshAppendix, "replace the on-demand appendix of this report (BENCHMARKS.md) with the committed on-demand reports (bench/stress.md, bench/ablation.md) and exit; nothing is measured")
	fs.StringVar(&o.AgentLog, "agent-log", o.AgentLog, "file for the S3 rigs' agent log (V(1), timestamps) and the bench's marks; off when empty")
}

// Validate checks the options.
func (o *Options) Validate() error {
	var errs []error
	if o.WebhookDuration < time.Second {
		errs = append(errs, errors.New("-webhook-duration must be at least 1s"))
	}
	if o.WebhookTargetDuration < o.WebhookDuration {
		errs = append(errs, errors.New("-webhook-target-duration must be at least -webhook-duration"))
	}
	if o.WebhookBlock < 200*time.Millisecond || o.WebhookBlock > o.WebhookDuration {
		errs = append(errs, errors.New("-webhook-block must be between 200ms and -webhook-duration"))
	}
	for _, n := range []int{o.BenchCount, o.HelperRepeats, o.DiskRepeats, o.MountRepeats, o.DetectRepeats, o.E2ERepeats, o.ContainersRepeats, o.StressRepeats, o.StressPods, o.AblationRepeats} {
		if n < 1 {
			errs = append(errs, errors.New("counts and repeats must be at least 1"))
			break
		}
	}
	if fakes := benchFakeLoops.Last - benchFakeLoops.First + 1; o.DiskRepeats > fakes {
		errs = append(errs, fmt.Errorf("-disk-repeats %d: the lost-disk section has %d loop devices (%s) for fakes", o.DiskRepeats, fakes, benchFakeLoops))
	}
	if _, err := os.Stat(filepath.Join(o.Root, "go.mod")); err != nil {
		errs = append(errs, fmt.Errorf("-root %s is not the repository root: %w", o.Root, err))
	}
	if _, err := o.selectedVariants(); err != nil {
		errs = append(errs, err)
	}
	if _, err := parsePodCounts(o.AblationPods); err != nil {
		errs = append(errs, fmt.Errorf("-ablation-pods: %w", err))
	}
	for _, s := range o.only() {
		if _, ok := sectionByName(s); !ok {
			errs = append(errs, fmt.Errorf("unknown section %q", s))
		}
	}
	return errors.Join(errs...)
}

func (o *Options) only() []string {
	if o.Only == "" {
		return nil
	}
	return strings.Split(o.Only, ",")
}

type section struct {
	name string
	run  func(ctx context.Context, o *Options) Section
	// onDemand sections run only when -only names them (make bench embeds their last
	// committed result instead, stressReportFile).
	onDemand bool
}

func sections() []section {
	// The sections issue 26 and 25 added or changed come first, so that a run cut short (the
	// report is written after every section) still holds them.
	return []section{
		{name: "mount", run: runLostMount},
		{name: "scale", run: runScale},
		{name: "webhook", run: runWebhookLoad},
		{name: "e2e", run: runE2EPlugin},
		{name: "containers", run: runContainers},
		{name: "disk", run: runLostDisk},
		{name: "helper", run: runHelper},
		{name: "gobench", run: runGoBench},
		{name: "stress", run: runStress, onDemand: true},
		{name: "ablation", run: runAblation, onDemand: true},
	}
}

func sectionNames() []string {
	var n []string
	for _, s := range sections() {
		n = append(n, s.name)
	}
	return n
}

func sectionByName(name string) (section, bool) {
	for _, s := range sections() {
		if s.name == name {
			return s, true
		}
	}
	return section{}, false
}

func run(ctx context.Context, o *Options) error {
	r := &Report{Started: time.Now(), Command: "make bench", StartLoad: LoadAvg(), Machine: DescribeMachine()}
	var err error
	defer sharedControlPlane.stop()
	var failed []string
	var todo []section
	for _, s := range sections() {
		if !s.onDemand {
			todo = append(todo, s)
		}
	}
	if names := o.only(); names != nil {
		todo = nil
		for _, n := range names {
			s, _ := sectionByName(n)
			todo = append(todo, s)
		}
		r.Command = "go run ./hack/bench -only " + o.Only
	}
	for _, s := range todo {
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, ">> %s (load %s)\n", s.name, LoadAvg())
		start, load := time.Now(), LoadAvg()
		sec := s.run(ctx, o)
		sec.Elapsed, sec.Load = time.Since(start), load
		if sec.Err != nil {
			failed = append(failed, s.name)
			fmt.Fprintf(os.Stderr, "!! %s failed: %v\n", s.name, sec.Err)
		}
		fmt.Fprintf(os.Stderr, "<< %s done in %s\n", s.name, sec.Elapsed.Round(time.Second))
		if sec.Raw != "" {
			if err := writeRaw(o, s.name, sec.Raw); err != nil {
				return err
			}
			what := "Raw samples (milliseconds)"
			if s.name == "scale" {
				what = "The idle agent's CPU profile (go tool pprof -top, flat and cumulative)"
			}
			sec.Notes = append(sec.Notes, fmt.Sprintf("%s: `%s`.", what, filepath.Join(o.RawDir, s.name+".txt")))
		}
		r.Sections = append(r.Sections, sec)
		// Write after every section so an interrupted run keeps what it measured.
		if err := writeReport(o.Out, r); err != nil {
			return err
		}
	}
	if o.only() == nil {
		if r.Appendix, err = committedAppendix(o); err != nil {
			return err
		}
		if err := writeReport(o.Out, r); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("sections failed: %s (see %s)", strings.Join(failed, ", "), o.Out)
	}
	return ctx.Err()
}

// writeRaw writes a section's raw samples to <raw dir>/<name>.txt (the raw dir is relative to
// the repository root, as go test's output in the gobench section).
func writeRaw(o *Options, name, raw string) error {
	dir := o.RawDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(o.Root, dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".txt"), []byte(raw), 0o644)
}

func writeReport(path string, r *Report) error {
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return err
	}
	if err := r.Write(f); err != nil {
		_ = f.Close() // the write error is the one to report
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

func main() {
	o := NewOptions()
	o.AddFlags(flag.CommandLine)
	flag.Parse()
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	// Logging is off for every handler alike: the figures are the admission path, not log I/O.
	ctrllog.SetLogger(logr.Discard())
	if o.RefreshAppendix != "" {
		if err := refreshAppendix(o, o.RefreshAppendix); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}
