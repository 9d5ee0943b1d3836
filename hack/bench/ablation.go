package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/containermount/containermounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
)

// ablationVariant is one agent of the ablation section: the shipped one, or the shipped one with
// one mechanism of the rescue path switched off.
type ablationVariant struct {
	name string
	// off says what is switched off and where the mechanism lives.
	off        string
	eventDelay *time.Duration
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
	zero := time.Duration(0)
	return []ablationVariant{
		{name: shippedVariant, off: "nothing (the shipped agent)"},
		{name: "event-delay", off: "held Events: sent at once (--event-delay=0; nodeagent/events.go)", eventDelay: &zero},
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
		RanAgainst: "the lost-mount section's host rig (the agent's S3 rescue with fusewatch and containermount's remounter as the agent wires them, " +
			"real s3fs, a real S3 server, the objects in a real kube-apiserver " + KubeVersion + ") with one container per pod as the containers " +
			"section makes them (a process in a mount namespace of its own, unshare(1), binding its pod's target with propagation None; " +
			"the only stand-in is its cgroup as containermount reads it). The agent is stopped and started again before each incident with the " +
			"variant's switch (the Events' hold).",
	}
	if err := ablation(ctx, o, &s); err != nil {
		s.Err = err
	}
	return s
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
	if _, err := exec.LookPath("unshare"); err != nil {
		return fmt.Errorf("unshare not found (apt-get install util-linux): %w", err)
	}
	if sup := mountreplace.NodeSupport(); !sup.Beneath {
		return fmt.Errorf("this kernel cannot mount beneath (the shipped agent would stack): %w", sup.Err)
	}
	variants, err := o.selectedVariants()
	if err != nil {
		return err
	}
	sizes, err := parsePodCounts(o.AblationPods)
	if err != nil {
		return err
	}
	ro, logPath, err := o.agentLogOr(filepath.Join(os.TempDir(), "pvrescue-bench-ablation-agent.log"))
	if err != nil {
		return err
	}
	stopBusy, err := startBusyLoops(o.AblationBusy)
	if err != nil {
		return err
	}
	defer stopBusy()

	cells := map[string]*ablationCell{}
	key := func(pods int, v string) string { return fmt.Sprintf("%d pods, %s", pods, v) }
	start := time.Now()
	for _, pods := range sizes {
		if err := ablationRig(ctx, ro, pods, variants, func(v string) *ablationCell {
			k := key(pods, v)
			if cells[k] == nil {
				cells[k] = &ablationCell{}
			}
			return cells[k]
		}); err != nil {
			return fmt.Errorf("%d pods: %w", pods, err)
		}
	}
	took := time.Since(start)

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
		fmt.Sprintf("Incident (the e2e window's \"kept down\" and the stress section's): every s3fs of the driver SIGKILLed and the node plugin stopped, so the agent bridges with its own s3fs; timed from the kill to each container's first read of a file written before the loss (through /proc/<pid>/root, polled every %s until every container has read once): the window the pod sees. Then the plugin serves again and the agent hands back (not timed); the next incident starts on the driver's mounts with no bridge left, after a random wait in [0, %s).", benchPoll, stressMaxDephase),
		fmt.Sprintf("Switched off, one at a time: %s.", strings.Join(offs, "; ")),
		fmt.Sprintf("Rounds: %d per pod count; each round runs every variant once and the shipped agent twice (first and in the middle), the others in an order rotated by round, so that load that drifts during the run falls on all alike. %d pod counts took %s in all.", o.AblationRepeats, len(sizes), took.Round(time.Second)),
		"Verdict, the same rule both ways: each incident gives a p50 and a max over its containers; the spread is the range of the shipped agent's incidents of the same run and pod count (shown as ratios to the shipped cell's pooled figure). \"beyond spread, slower without it\" when the variant's median incident is slower than the slowest shipped incident (the mechanism shortens the window), \"beyond spread, faster without it\" when it is faster than the fastest shipped incident (the mechanism lengthens it), \"inside spread\" otherwise. Ratios are the pooled p50 (or max) over every container of every incident of the cell against the shipped cell's.",
		fmt.Sprintf("Load: %d busy loops (sh) beside the rig for the whole run, as the stress section runs. The agent runs in the bench process. The plugin's layout is the plain one (an s3fs per target, as the stress section's 5-pod rig): at %s pods as many daemons die per incident. Shipped configuration otherwise, except s3.bridgeFlapLimit 0 (the incidents come faster than the flap window); the bridges' free-space floor is the shipped one (where the disk has less free than it, a bridge starts with what s3fs needs: s3fs.StartableFloorMB).", o.AblationBusy, o.AblationPods),
		"Not switched off: the bridges' CPU weight (removed in bd3a935); worker pools (none found in the shipped rescue path: nodeagent/s3mount, containermount, fusewatch and cmd/pvrescue-agent start one restore goroutine per PV and bind a PV's targets one after the other); scheduling priorities (the agent sets none since --nice was removed).",
		fmt.Sprintf("The agent's log (V(1), with the bench's marks): `%s`.", logPath))
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

// ablationRig runs o.AblationRepeats rounds of every variant on a rig of pods pods, one
// container each, adding each incident to cell(variant).
func ablationRig(ctx context.Context, o *Options, pods int, variants []ablationVariant, cell func(string) *ablationCell) error {
	const before = "written before\n"
	ctrRoot, err := os.MkdirTemp("", "pvrescue-bench-ablation-ctr-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(ctrRoot) }()
	data := filepath.Join(ctrRoot, "app", "data")
	none := corev1.MountPropagationNone
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox",
		VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: data, MountPropagation: &none}}}}}
	cgroups := map[int]string{}
	remounter := func(deps nodeagent.Deps) (nodeagent.ContainerRemounter, error) {
		cmOS, err := containermount.NewOS("/proc", mountreplace.NodeSupport())
		if err != nil {
			return nil, err
		}
		cmOS.Proc = containermounttest.CgroupProcFS{ProcFS: cmOS.Proc, Cgroups: cgroups}
		return containermount.New(deps, cmOS, containermount.NewOptions())
	}
	base := s3RigOptions{names: newS3Names(fmt.Sprintf("bench-ablation-%d", pods)), pods: pods, pod: spec,
		files: map[string]string{"before.txt": before}, remounter: remounter}
	r, err := newS3Rig(ctx, o, base)
	if err != nil {
		return err
	}
	defer r.close()
	pl, err := r.cs.CoreV1().Pods(r.names.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	uidOf := map[string]string{}
	for _, p := range pl.Items {
		uidOf[s3mount.TargetPath(r.kubelet, string(p.UID), r.names.pv)] = string(p.UID)
	}
	var ctrs []*benchContainer
	defer func() {
		for _, c := range ctrs {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	}()
	for _, t := range r.targets {
		c := &benchContainer{name: "app", propagation: "None", data: data, target: t, file: "before.txt", content: before}
		if err := r.startContainer(ctx, c, []string{r.kubelet}); err != nil {
			return err
		}
		ctrs = append(ctrs, c)
		cgroups[c.cmd.Process.Pid] = containermounttest.PodCgroup(uidOf[t], containerID(c.name))
		if ok, _ := readOutcome(c.path(filepath.Join(c.data, c.file)), c.content); !ok {
			return fmt.Errorf("container of %s does not read %s before the loss", t, c.file)
		}
	}
	staging := filepath.Join(r.state, "s3", "staging", r.names.pv)
	for round := 0; round < o.AblationRepeats; round++ {
		for _, v := range ablationSchedule(variants, round) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ro := base
			ro.eventDelay = v.eventDelay
			r.stopRunningAgent()
			if err := r.startAgent(logr.NewContext(ctx, r.log), ro); err != nil {
				return fmt.Errorf("%s agent: %w", v.name, err)
			}
			time.Sleep(time.Duration(rand.Int64N(int64(stressMaxDephase))))
			label := fmt.Sprintf("%d pods, %s", pods, v.name)
			r.log.Info("bench: loss", "kind", label, "run", round)
			devs := r.targetDevs()
			t0 := time.Now()
			for _, m := range r.driverMounts {
				m.Kill()
			}
			r.driverMounts = nil
			r.killDriverDaemons()
			r.stopPlugin()
			if err := r.waitDead(ctx, devs); err != nil {
				return fmt.Errorf("%s round %d: mount not dead after the kill: %w", v.name, round, err)
			}
			got := make([]time.Duration, len(ctrs))
			seen := make([]bool, len(ctrs))
			left := len(ctrs)
			if err := testenv.WaitUntil(ctx, restoreTimeout, benchPoll, func() bool {
				for i, c := range ctrs {
					if !seen[i] && readsBack(c.path(filepath.Join(c.data, c.file)), c.content) {
						seen[i], got[i] = true, time.Since(t0)
						left--
					}
				}
				return left == 0
			}); err != nil {
				return fmt.Errorf("%s round %d: %d of %d containers not readable again within %s: %w", v.name, round, left, len(ctrs), restoreTimeout, err)
			}
			r.log.Info("bench: readable again", "kind", label, "run", round, "after", slices.Max(got))
			cell(v.name).incidents = append(cell(v.name).incidents, got)
			if err := r.startPlugin(); err != nil {
				return err
			}
			if err := testenv.WaitUntil(ctx, restoreTimeout, benchPoll, func() bool {
				return r.onDriver() && r.allRead("before.txt", before) && len(testenv.S3fsPIDs(staging)) == 0 && len(r.plugin.Pids()) > 0
			}); err != nil {
				return fmt.Errorf("%s round %d: not handed back with no bridge within %s: %w", v.name, round, restoreTimeout, err)
			}
			fmt.Fprintf(os.Stderr, "   ablation (%d pods): round %d %s: max %s\n", pods, round, v.name, Ms(slices.Max(got)))
		}
	}
	return nil
}

// ablationReportFile is where the ablation section's report is committed (`make bench-ablation`).
const ablationReportFile = "ablation.md"
