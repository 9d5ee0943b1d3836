package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ablationVariant is one agent of the ablation section: the shipped one, or the shipped one with
// one mechanism of the rescue path switched off by its arguments.
type ablationVariant struct {
	name string
	// off says what is switched off and where the mechanism lives.
	off string
	// args are added to the agent's installed arguments.
	args []string
}

const shippedVariant = "shipped"

func ablationNames() []string {
	var out []string
	for _, v := range ablationVariants()[1:] {
		out = append(out, v.name)
	}
	return out
}

func ablationVariants() []ablationVariant {
	return []ablationVariant{
		{name: shippedVariant, off: "nothing (the shipped agent)"},
	}
}

// selectedVariants returns the shipped variant and those -ablation-variants names (all when empty).
func (o *Options) selectedVariants() ([]ablationVariant, error) {
	all := ablationVariants()
	if o.AblationVariants == "" {
		return all, nil
	}
	out := []ablationVariant{all[0]}
	for _, n := range strings.Split(o.AblationVariants, ",") {
		i := slices.IndexFunc(all, func(v ablationVariant) bool { return v.name == strings.TrimSpace(n) })
		if i < 0 {
			return nil, fmt.Errorf("-ablation-variants: unknown mechanism %q", n)
		}
		if i > 0 && !slices.ContainsFunc(out, func(v ablationVariant) bool { return v.name == all[i].name }) {
			out = append(out, all[i])
		}
	}
	return out, nil
}

// ablationSchedule is one round's order: the shipped agent first and again in the middle, the
// others rotated by round, so that drift in the machine's load falls on every variant alike.
func ablationSchedule(vs []ablationVariant, round int) []ablationVariant {
	shipped, others := vs[0], slices.Clone(vs[1:])
	if len(others) > 0 {
		k := round % len(others)
		others = append(others[k:], others[:k]...)
	}
	half := len(others) / 2
	out := []ablationVariant{shipped}
	out = append(out, others[:half]...)
	out = append(out, shipped)
	return append(out, others[half:]...)
}

func parsePodCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("pod count %q: want a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func runAblation(ctx context.Context, o *Options) Section {
	s := Section{
		Title: "Ablation (on demand): the window a pod sees with each mechanism of the rescue path switched off",
		RanAgainst: "the e2e section's cluster and plugin (kubelet " + KubeVersion + ", containerd, kube-apiserver and etcd on this machine; the test CSI " +
			"plugin as a DaemonSet with k8s-csi-s3's yandex layout; pvrescue installed from manifests/), run as e2e/scenarios' " + e2eBenchName +
			" with its window matrix replaced by the ablation's steps (" + e2eAblationEnv + "): before each step the agent's DaemonSet gets the " +
			"variant's arguments and its new pod is ready.",
	}
	if err := ablation(ctx, o, &s); err != nil {
		s.Err = err
	}
	return s
}

// e2eAblationEnv mirrors e2e/scenarios.BenchAblationEnv.
const e2eAblationEnv = "PVRESCUE_BENCH_ABLATION"

// ablationStep mirrors e2e/scenarios.AblationStep.
type ablationStep struct {
	Pods    int      `json:"pods"`
	Variant string   `json:"variant"`
	Args    []string `json:"args"`
	Cases   []string `json:"cases"`
}

// ablationCases are the incidents of each step: the plugin pod deleted, the DaemonSet rolled.
var ablationCases = []string{"deleted", "rolled"}

// ablationPlan is every step of the run: per pod count, o.AblationRepeats rounds of
// ablationSchedule.
func ablationPlan(sizes []int, variants []ablationVariant, rounds int) []ablationStep {
	var steps []ablationStep
	for _, pods := range sizes {
		for round := range rounds {
			for _, v := range ablationSchedule(variants, round) {
				steps = append(steps, ablationStep{Pods: pods, Variant: v.name, Args: v.args, Cases: ablationCases})
			}
		}
	}
	return steps
}

// ablationCell is what one (pods, variant) cell measured: each incident's per-container windows.
type ablationCell struct {
	incidents [][]time.Duration
}

func (c *ablationCell) pooled() []time.Duration {
	var all []time.Duration
	for _, in := range c.incidents {
		all = append(all, in...)
	}
	return all
}

// perIncident is one figure (p50 or max) of each incident.
func (c *ablationCell) perIncident(p float64) []time.Duration {
	out := make([]time.Duration, 0, len(c.incidents))
	for _, in := range c.incidents {
		out = append(out, Percentile(in, p))
	}
	return out
}

func ablation(ctx context.Context, o *Options, s *Section) error {
	variants, err := o.selectedVariants()
	if err != nil {
		return err
	}
	sizes, err := parsePodCounts(o.AblationPods)
	if err != nil {
		return err
	}
	plan, err := json.Marshal(ablationPlan(sizes, variants, o.AblationRepeats))
	if err != nil {
		return err
	}
	run, err := runE2EBench(ctx, o, "ablation", e2eAblationEnv+"="+string(plan))
	if err != nil {
		return err
	}
	took := run.took
	cells := map[string]*ablationCell{}
	key := func(pods int, v string) string { return fmt.Sprintf("%d pods, %s", pods, v) }
	for _, c := range run.r.Window {
		k := key(c.Pods, c.Behaviour)
		if cells[k] == nil {
			cells[k] = &ablationCell{}
		}
		ws := make([]time.Duration, len(c.ContainerWindowMs))
		for i, ms := range c.ContainerWindowMs {
			ws[i] = time.Duration(ms * float64(time.Millisecond))
		}
		cells[k].incidents = append(cells[k].incidents, ws)
	}
	if err := run.outcome(o, s); err != nil {
		return err
	}
	for _, pods := range sizes {
		for _, v := range variants {
			if cells[key(pods, v.name)] == nil {
				return fmt.Errorf("%s: no incident measured", key(pods, v.name))
			}
		}
	}

	var names []string
	series := map[string][]time.Duration{}
	s.Header = []string{"pods", "switched off", "incidents × containers", "p50", "max", "p50 ratio to shipped", "max ratio to shipped",
		"incidents' p50: min–median–max, ratios to shipped's p50 (shipped's row: the spread)", "incidents' max: min–median–max, ratios to shipped's max (shipped's row: the spread)", "verdict p50", "verdict max"}
	for _, pods := range sizes {
		base := cells[key(pods, shippedVariant)]
		bp50, bmax := Percentile(base.pooled(), 50), Percentile(base.pooled(), 100)
		bInc50, bIncMax := base.perIncident(50), base.perIncident(100)
		for _, v := range variants {
			c := cells[key(pods, v.name)]
			k := key(pods, v.name)
			names = append(names, k)
			series[k] = c.pooled()
			p50, mx := Percentile(c.pooled(), 50), Percentile(c.pooled(), 100)
			inc50, incMax := c.perIncident(50), c.perIncident(100)
			v50, vmax := "—", "—"
			if v.name != shippedVariant {
				v50, vmax = spreadVerdict(inc50, bInc50), spreadVerdict(incMax, bIncMax)
			}
			s.Rows = append(s.Rows, []string{fmt.Sprint(pods), v.name, fmt.Sprintf("%d × %d", len(c.incidents), pods), Ms(p50), Ms(mx),
				ratioTo(p50, bp50), ratioTo(mx, bmax), rangeRatio(inc50, bp50), rangeRatio(incMax, bmax), v50, vmax})
		}
	}
	s.Raw = RawSamples(names, series)
	offs := []string{"nothing (no mechanism is left to switch off)"}
	if len(variants) > 1 {
		offs = nil
	}
	for _, v := range variants[1:] {
		offs = append(offs, fmt.Sprintf("%s — %s", v.name, v.off))
	}
	s.Notes = append(s.Notes,
		"Incidents: each step runs the e2e window's \"deleted\" (the plugin pod deleted) and \"rolled\" (kubectl rollout restart of the plugin) cases on its pods; each is timed from the death (the last s3fs of the plugin exited) to each pod's first good read through its own container (polled every 10 ms): the window the pod sees. A cell pools both cases.",
		fmt.Sprintf("Switched off, one at a time: %s.", strings.Join(offs, "; ")),
		fmt.Sprintf("Rounds: %d per pod count; each round runs every variant once and the shipped agent twice (first and in the middle), the others in an order rotated by round, so that load that drifts during the run falls on all alike. The run took %s.", o.AblationRepeats, took.Round(time.Second)),
		"Verdict, the same rule both ways: each incident gives a p50 and a max over its containers; the spread is the range of the shipped agent's incidents of the same run and pod count (shown as ratios to the shipped cell's pooled figure). \"beyond spread, slower without it\" when the variant's median incident is slower than the slowest shipped incident (the mechanism shortens the window), \"beyond spread, faster without it\" when it is faster than the fastest shipped incident (the mechanism lengthens it), \"inside spread\" otherwise. Ratios are the pooled p50 (or max) over every container of every incident of the cell against the shipped cell's.",
		"Removed (issue 52; figures in ARCHITECTURE.md): pass snapshots, joiners, held records, prefetched processes and --nice after the host-rig runs; the Events' hold and mount-table settling after this section's run on the e2e cluster (bench/ablation.md of 2026-12-06 20:37). A new mechanism for the window gets a variant here, with the agent argument that switches it off.")
	return nil
}

// spreadVerdict compares a variant's per-incident figures with the shipped agent's: beyond the
// spread when the variant's median incident lies outside the range of the shipped agent's
// incidents of the same run, either way; inside it otherwise.
func spreadVerdict(variant, shipped []time.Duration) string {
	if len(variant) == 0 || len(shipped) == 0 {
		return "no samples"
	}
	med := Percentile(variant, 50)
	smin, smax := slices.Min(shipped), slices.Max(shipped)
	switch {
	case med > smax:
		return "beyond spread, slower without it"
	case med < smin:
		return "beyond spread, faster without it"
	default:
		return "inside spread"
	}
}

func ratioTo(v, base time.Duration) string {
	if base <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", float64(v)/float64(base))
}

// rangeRatio renders min–median–max of xs as ratios to base.
func rangeRatio(xs []time.Duration, base time.Duration) string {
	if len(xs) == 0 || base <= 0 {
		return "—"
	}
	r := func(d time.Duration) float64 { return float64(d) / float64(base) }
	return fmt.Sprintf("%.2f–%.2f–%.2f×", r(slices.Min(xs)), r(Percentile(xs, 50)), r(slices.Max(xs)))
}

// ablationReportFile is where the ablation section's report is committed (`make bench-ablation`).
const ablationReportFile = "ablation.md"
