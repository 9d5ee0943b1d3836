package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/containermount/containermounttest"
)

func runContainers(ctx context.Context, o *Options) Section {
	s := Section{
		Title: "Agent, lost mount inside containers: plugin restart → every container of a 3-container pod reads again, replace beneath beside stacking",
		RanAgainst: "the same stack as the lost-mount section (s3mount's Restorer, real s3fs, real versitygw, the " +
			"test node plugin, a real kube-apiserver " + KubeVersion + ") with nodeagent/containermount's Remounter as the " +
			"agent wires it (real kernel calls: open_tree, setns, move_mount, umount2), twice side by side: the agent as shipped " +
			"on this kernel (replace: the live mount put beneath the dead one with MOVE_MOUNT_BENEATH, then the dead one " +
			"detached, at kubelet's target and in every container) and the agent with its stacking fallback forced " +
			"(s3mount without a Replacer, containermount with a mount-beneath support that says no: the live mount " +
			"bound on top of the dead one, as before replace-beneath and as with --container-remount=false at kubelet's target; on Linux < 6.5 the agent " +
			"stacks the same way, by move_mount on top, and counts it). No kubelet or container " +
			"runtime: each container is a process in a mount namespace of its own (unshare(1)) that binds the pod's volume " +
			"target as runc does for its mountPropagation — `htc` HostToContainer (rslave bind), `none` None (private " +
			"bind), `sub` a subPath `sub` (private bind of the subdirectory) — and then detaches its copies of the kubelet " +
			"directories, as a runtime's rootfs holds none. The only stand-in is the processes' cgroup as containermount " +
			"reads it (/proc/<pid>/cgroup reports the pod's kubepods path; test processes cannot join one without kubelet).",
	}
	if err := containers(ctx, o, &s); err != nil {
		s.Err = err
	}
	return s
}

// benchContainer is one container of the bench's pod: a process in its own mount namespace.
type benchContainer struct {
	name, propagation string
	// src is what it binds (relative to the volume), at data (a host path, seen inside it).
	src, data string
	// target is the kubelet target of its pod's volume (empty: the rig's first pod's).
	target string
	// file and content are what it reads back to count as restored.
	file, content string
	cmd           *exec.Cmd
}

// path is the container's view of p, reachable from the host.
func (c *benchContainer) path(p string) string {
	return fmt.Sprintf("/proc/%d/root%s", c.cmd.Process.Pid, p)
}

// errStackingForced is the stacking agent's answer to "can the kernel mount beneath?".
var errStackingForced = errors.New("turned off by the bench, to time the stacking fallback (the agent before replace-beneath, and on Linux < 6.5) beside replace in the same run")

// Places whose depth and reads the section reports: the host's kubelet target, then the containers.
const placeHost = "host"

// ctrAgent is one agent of the section with a pod of its own: the shipped one (replace) or the
// one with the stacking fallback forced.
type ctrAgent struct {
	name     string
	stacking bool
	rig      *s3Rig
	ctrs     []*benchContainer
	cgroups  map[int]string
	samples  []ctrSample
	// reads and bare count, by place, the polls during the restores and those that found the
	// bare directory (the file missing: neither the dead mount's ENOTCONN nor the bucket's file).
	reads, bare map[string]int
	// depths are the mounts at each place's mount point: before the first loss, then after each.
	depths map[string][]int
}

type ctrSample struct{ host, htc, all time.Duration }

func (a *ctrAgent) places() []string {
	p := []string{placeHost}
	for _, c := range a.ctrs {
		p = append(p, c.name)
	}
	return p
}

func containers(ctx context.Context, o *Options, s *Section) error {
	const before, inSub = "written before\n", "inside sub\n"
	if _, err := exec.LookPath("unshare"); err != nil {
		return fmt.Errorf("unshare not found (apt-get install util-linux): %w", err)
	}
	if sup := mountreplace.NodeSupport(); !sup.Beneath {
		return fmt.Errorf("this kernel cannot mount beneath, both agents would stack: %w", sup.Err)
	}
	agents := []*ctrAgent{{name: "replace"}, {name: "stacking", stacking: true}}
	for _, a := range agents {
		a.cgroups, a.reads, a.bare, a.depths = map[int]string{}, map[string]int{}, map[string]int{}, map[string][]int{}
		a.ctrs = []*benchContainer{
			{name: "htc", propagation: "HostToContainer", file: "before.txt", content: before},
			{name: "none", propagation: "None", file: "before.txt", content: before},
			{name: "sub", propagation: "None", src: "sub", file: "inside.txt", content: inSub},
		}
		// The agent matches a container's mount to the pod spec by its mount point (the
		// tenant-proof check of containermount), so the spec names the path each stand-in
		// container binds at.
		ctrRoot, err := os.MkdirTemp("", "pvrescue-bench-ctr-"+a.name+"-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(ctrRoot) }() // the containers' empty mount directories
		var spec corev1.PodSpec
		for _, c := range a.ctrs {
			c.data = filepath.Join(ctrRoot, c.name, "data")
			mode := corev1.MountPropagationNone
			if c.propagation == "HostToContainer" {
				mode = corev1.MountPropagationHostToContainer
			}
			spec.Containers = append(spec.Containers, corev1.Container{Name: c.name, Image: "busybox",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: c.data, SubPath: c.src, MountPropagation: &mode}}})
		}
		support := mountreplace.NodeSupport() // what the agent acts on (its start-up probe)
		if a.stacking {
			support = mountreplace.Support{Err: errStackingForced}
		}
		cgroups := a.cgroups
		prefix := "bench-ctr"
		if a.stacking {
			prefix = "bench-ctrstack"
		}
		r, err := newS3Rig(ctx, o, s3RigOptions{names: newS3Names(prefix), pod: spec, stacking: a.stacking,
			files: map[string]string{"before.txt": before, "sub/inside.txt": inSub},
			remounter: func(deps nodeagent.Deps) (nodeagent.ContainerRemounter, error) {
				cmOS, err := containermount.NewOS("/proc", support)
				if err != nil {
					return nil, err
				}
				cmOS.Proc = containermounttest.CgroupProcFS{ProcFS: cmOS.Proc, Cgroups: cgroups}
				return containermount.New(deps, cmOS, containermount.NewOptions())
			}})
		if err != nil {
			return fmt.Errorf("%s agent: %w", a.name, err)
		}
		a.rig = r
		defer r.close()
	}
	// Both rigs exist before any container starts, so every container detaches its copies of
	// both kubelet directories: no namespace holds the other agent's mounts.
	var kubelets []string
	for _, a := range agents {
		kubelets = append(kubelets, a.rig.kubelet)
	}
	for _, a := range agents {
		for _, c := range a.ctrs {
			if err := a.rig.startContainer(ctx, c, kubelets); err != nil {
				return err
			}
			defer func() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() }()
			// The map is read by the remounter only during a restore, after this loop.
			a.cgroups[c.cmd.Process.Pid] = containermounttest.PodCgroup(string(a.rig.pod.UID), containerID(c.name))
			if ok, _ := readOutcome(c.path(filepath.Join(c.data, c.file)), c.content); !ok {
				return fmt.Errorf("%s agent: container %s does not read %s before the loss", a.name, c.name, c.file)
			}
		}
		if err := a.recordDepths(); err != nil {
			return err
		}
	}

	// The two agents' losses alternate, in the order replace, stacking, then stacking, replace,
	// so that a change in the machine's load during the section falls on both alike.
	start := time.Now()
	for i := 0; i < o.ContainersRepeats; i++ {
		order := []*ctrAgent{agents[0], agents[1]}
		if i%2 == 1 {
			order[0], order[1] = order[1], order[0]
		}
		for _, a := range order {
			if err := a.loss(ctx, i); err != nil {
				return fmt.Errorf("%s agent, run %d: %w", a.name, i, err)
			}
		}
	}
	loops := time.Since(start)
	// A last look once both agents had time to finish what a pass does after the reads came back.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Second):
	}
	for _, a := range agents {
		if err := a.recordDepths(); err != nil {
			return err
		}
	}
	report(s, agents, loops)
	return nil
}

// loss restarts the agent's plugin and waits until the host target and every container read
// their file again, counting reads of the bare directory meanwhile.
func (a *ctrAgent) loss(ctx context.Context, i int) error {
	r := a.rig
	// Let fusewatch take in the last restore's daemon (its walk on the mount table change); the
	// other agent's loss came in between, and dephase waits on.
	time.Sleep(200 * time.Millisecond)
	r.dephase(ctx)
	if i > 0 {
		if err := a.recordDepths(); err != nil {
			return err
		}
	}
	r.log.Info("bench: loss", "run", i, "agent", a.name)
	devs := r.targetDevs()
	t0 := time.Now()
	if err := r.restartPlugin(); err != nil {
		return err
	}
	if err := r.waitDead(ctx, devs); err != nil {
		return fmt.Errorf("mount not dead after the plugin restart: %w", err)
	}
	got := map[string]time.Duration{}
	look := func(place, path, content string) {
		ok, bare := readOutcome(path, content)
		a.reads[place]++
		if bare {
			a.bare[place]++
		}
		if _, seen := got[place]; ok && !seen {
			got[place] = time.Since(t0)
		}
	}
	err := testenv.WaitUntil(ctx, restoreTimeout, benchPoll, func() bool {
		look(placeHost, filepath.Join(r.target, "before.txt"), "written before\n")
		for _, c := range a.ctrs {
			look(c.name, c.path(filepath.Join(c.data, c.file)), c.content)
		}
		return len(got) == len(a.ctrs)+1
	})
	if err != nil {
		return fmt.Errorf("not every container reads again within %s (read again: %v): %w", restoreTimeout, got, err)
	}
	all := time.Duration(0)
	for _, c := range a.ctrs {
		all = max(all, got[c.name])
	}
	a.samples = append(a.samples, ctrSample{host: got[placeHost], htc: got["htc"], all: all})
	r.log.Info("bench: every container reads again", "run", i, "agent", a.name, "after", all)
	return nil
}

// recordDepths appends the number of mounts at each place's mount point (host: the kubelet
// target in the agent's namespace; container: its volume mount in its own).
func (a *ctrAgent) recordDepths() error {
	add := func(place, mountinfoFile, point string) error {
		b, err := os.ReadFile(mountinfoFile)
		if err != nil {
			return fmt.Errorf("%s agent, %s: %w", a.name, place, err)
		}
		n, err := depthAt(string(b), point)
		if err != nil {
			return fmt.Errorf("%s agent, %s: %w", a.name, place, err)
		}
		a.depths[place] = append(a.depths[place], n)
		return nil
	}
	if err := add(placeHost, "/proc/self/mountinfo", a.rig.target); err != nil {
		return err
	}
	for _, c := range a.ctrs {
		if err := add(c.name, fmt.Sprintf("/proc/%d/mountinfo", c.cmd.Process.Pid), c.data); err != nil {
			return err
		}
	}
	return nil
}

// depthAt is the number of mounts whose mount point is point in a mountinfo table: 1 for a
// single mount, one more for every mount stacked on it.
func depthAt(table, point string) (int, error) {
	mounts, err := mountinfo.Parse(table)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, m := range mounts {
		if m.MountPoint == point {
			n++
		}
	}
	return n, nil
}

// readOutcome reads path: ok when it holds content, bare when the file is missing — the path
// shows the directory beneath the mount (neither the dead mount's ENOTCONN nor the bucket).
func readOutcome(path, content string) (ok, bare bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, errors.Is(err, fs.ErrNotExist)
	}
	return string(b) == content, false
}

// replaceCounts renders pvrescue_mount_replace_total of reg ("beneath 40, stacked/unsupported 40").
func replaceCounts(reg prometheus.Gatherer) string {
	mfs, err := reg.Gather()
	if err != nil {
		return "unreadable: " + err.Error()
	}
	var parts []string
	for _, mf := range mfs {
		if mf.GetName() != "pvrescue_mount_replace_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			k := l["mode"]
			if l["reason"] != "" {
				k += "/" + l["reason"]
			}
			parts = append(parts, fmt.Sprintf("%s %.0f", k, m.GetCounter().GetValue()))
		}
	}
	if len(parts) == 0 {
		return "none counted"
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func report(s *Section, agents []*ctrAgent, loops time.Duration) {
	rep, stk := agents[0], agents[1]
	pick := func(a *ctrAgent, f func(ctrSample) time.Duration) []time.Duration {
		var out []time.Duration
		for _, x := range a.samples {
			out = append(out, f(x))
		}
		return out
	}
	fAll := func(x ctrSample) time.Duration { return x.all }
	fHTC := func(x ctrSample) time.Duration { return x.htc }
	fHost := func(x ctrSample) time.Duration { return x.host }
	series := map[string][]time.Duration{}
	var names []string
	for _, a := range agents {
		for _, f := range []struct {
			n string
			f func(ctrSample) time.Duration
		}{{"all-containers", fAll}, {"hostToContainer", fHTC}, {"host-target", fHost}} {
			n := a.name + "-" + f.n
			names = append(names, n)
			series[n] = pick(a, f.f)
		}
	}
	s.Raw = RawSamples(names, series)
	for _, a := range agents {
		for _, p := range a.places() {
			s.Raw += fmt.Sprintf("%s-depth-%s %s\n", a.name, p, strings.Trim(fmt.Sprint(a.depths[p]), "[]"))
		}
	}

	n := len(rep.samples)
	last := func(a *ctrAgent, place string) int {
		d := a.depths[place]
		if len(d) == 0 {
			return 0
		}
		return d[len(d)-1]
	}
	depthsOf := func(a *ctrAgent, places ...string) string {
		var parts []string
		for _, p := range places {
			first := 0
			if d := a.depths[p]; len(d) > 0 {
				first = d[0]
			}
			parts = append(parts, fmt.Sprintf("%s %d→%d", p, first, last(a, p)))
		}
		return strings.Join(parts, " · ")
	}
	bareOf := func(a *ctrAgent, places ...string) string {
		b, r := 0, 0
		for _, p := range places {
			b, r = b+a.bare[p], r+a.reads[p]
		}
		return fmt.Sprintf("%d of %d", b, r)
	}
	// paired compares run i of each agent (adjacent in time): in how many pairs replace was
	// slower, in how many faster.
	paired := func(f func(ctrSample) time.Duration) (slower, faster int) {
		for i := range min(len(rep.samples), len(stk.samples)) {
			switch a, b := f(rep.samples[i]), f(stk.samples[i]); {
			case a > b:
				slower++
			case a < b:
				faster++
			}
		}
		return slower, faster
	}
	// The same sign test decides both ways (PairedVerdict); the p50 ratio is only reported.
	verdict := func(f func(ctrSample) time.Duration) string {
		rp50, sp50 := Percentile(pick(rep, f), 50), Percentile(pick(stk, f), 50)
		slower, faster := paired(f)
		return PairedVerdict("replace ≤ stacking", float64(rp50)/float64(sp50), slower, faster)
	}
	ratio := func(f func(ctrSample) time.Duration) string {
		r, st := pick(rep, f), pick(stk, f)
		return Ratio(float64(Percentile(r, 50)), float64(Percentile(st, 50))) + " / " + Ratio(float64(Percentile(r, 99)), float64(Percentile(st, 99)))
	}
	ctrNames := []string{"htc", "none", "sub"}
	row := func(figure string, a *ctrAgent, f func(ctrSample) time.Duration, ratioCol, depth, bare, target string) []string {
		xs := pick(a, f)
		return []string{figure, a.label(), fmt.Sprint(len(xs)), Ms(Percentile(xs, 50)), Ms(Percentile(xs, 99)), Ms(Percentile(xs, 100)), ratioCol, depth, bare, target}
	}
	allRep := pick(rep, fAll)
	s.Header = []string{"figure", "agent", "samples", "p50", "p99", "max", "replace ÷ stacking (p50 / p99)",
		fmt.Sprintf("mounts at the mount point: before → after %d losses", n), "reads of the bare directory", "target"}
	s.Rows = [][]string{
		row("plugin restart → all 3 containers (HostToContainer, None, subPath) read again", rep, fAll, ratio(fAll), depthsOf(rep, ctrNames...), bareOf(rep, ctrNames...),
			"p50 < 2 s: "+Verdict(Percentile(allRep, 50).Seconds(), 2, "s")+"; "+verdict(fAll)),
		row("(same figure)", stk, fAll, "1.00×", depthsOf(stk, ctrNames...), bareOf(stk, ctrNames...), "—"),
		row("plugin restart → the HostToContainer container reads again", rep, fHTC, ratio(fHTC), depthsOf(rep, "htc"), bareOf(rep, "htc"), verdict(fHTC)),
		row("(same figure)", stk, fHTC, "1.00×", depthsOf(stk, "htc"), bareOf(stk, "htc"), "—"),
		row("plugin restart → host target reads again", rep, fHost, ratio(fHost), depthsOf(rep, placeHost), bareOf(rep, placeHost), verdict(fHost)),
		row("(same figure)", stk, fHost, "1.00×", depthsOf(stk, placeHost), bareOf(stk, placeHost), "—"),
	}
	maxDepth := func(a *ctrAgent, place string) int {
		m := 0
		for _, d := range a.depths[place] {
			m = max(m, d)
		}
		return m
	}
	s.Notes = append(s.Notes,
		fmt.Sprintf("Each run: a pause of 200 ms plus a random wait in [0, min(check interval, %s)) so the loss falls at a random point of the agent's periodic check, the plugin restart of the lost-mount section (every s3fs of the driver SIGKILLed, a new plugin serving the socket at once), then the host target's and every container's file is read every %s (the containers' through /proc/<pid>/root) until all read their content; the subPath container reads a file of the subdirectory (a root bind there would not show it). One sample per run gives the three times, so the figures of an agent share their runs.", maxDephase, Ms(benchPoll)),
		fmt.Sprintf("The two agents run side by side, each with its own rig (S3 server, plugin, pod, 3 containers, registry) in the same kube-apiserver, and their losses alternate (replace then stacking, then stacking then replace, %d losses each, %s in all): load that changes during the section falls on both alike, which two blocks one after the other would not give. Paired runs are run i of each agent, next to each other in time. An agent idles while the other's loss is timed; fusewatch in each sees the other's s3fs exit too and wakes its rescue for a pass that finds nothing to do.", n, loops.Round(100*time.Millisecond)),
		"Replace (shipped on this kernel: the start-up probe found MOVE_MOUNT_BENEATH): the agent replays NodePublishVolume at a fresh directory and puts the driver's new mount beneath the dead one at kubelet's target, then detaches the dead one; containermount does the same in each container's namespace, the HostToContainer one included (a mount put beneath does not propagate into it: its HostToContainer figure is containermount's, not propagation's). Stacking (forced: s3mount with no Replacer, containermount with a mount-beneath support whose error says the bench turned it off): the driver's new mount is bound on top of the dead one at the target and propagates on top into the HostToContainer container; containermount stacks a clone on top in the None and subPath containers. Without containermount those two would read again only after a restart (the injected liveness probe).",
		fmt.Sprintf("Depth: mount-table entries whose mount point is the place's path — the host's kubelet target in /proc/self/mountinfo, each container's volume mount in /proc/<pid>/mountinfo — read after set-up, before every loss and 1 s after the last (all values in the raw file). Highest seen: replace host %d, htc %d, none %d, sub %d; stacking host %d, htc %d, none %d, sub %d. The rig publishes at the target only (the test plugin's plain layout: no staging path).",
			maxDepth(rep, placeHost), maxDepth(rep, "htc"), maxDepth(rep, "none"), maxDepth(rep, "sub"), maxDepth(stk, placeHost), maxDepth(stk, "htc"), maxDepth(stk, "none"), maxDepth(stk, "sub")),
		fmt.Sprintf("Reads of the bare directory: polls (every %s, from the target found dead until the last place reads again) where the file was missing — the path showed the directory beneath the mount instead of the dead mount (ENOTCONN) or the bucket. A coarse check beside the node tests' 1 ms reader: a gap shorter than the poll can go unseen.", Ms(benchPoll)),
		fmt.Sprintf("pvrescue_mount_replace_total (each agent's own registry; s3mount counts only what its Replacer did, so the stacking agent's binds at the target are not in it): replace: %s; stacking: %s.", replaceCounts(rep.rig.reg), replaceCounts(stk.rig.reg)),
		fmt.Sprintf("Noise: the figures are quantised by the %s poll and taken on a shared 2-core machine; differences of a few ms between the agents, or a p99 (of %d samples: the slowest run), can be noise. The verdicts therefore pair run i of each agent (adjacent in time) and count the pairs where replace was slower and where it was faster: with no real difference either way is as likely, and one and the same one-sided sign test decides both ways — met when replace was faster in significantly many pairs (p < 0.05), missed when slower in significantly many, undecided otherwise; the p50 ratio is reported beside it and decides nothing.", Ms(benchPoll), n),
		fmt.Sprintf("Shipped defaults for both (check interval %s, containermount namespace timeout %s).", rep.rig.cfg.S3.CheckInterval.Duration, containermount.NewOptions().NamespaceTimeout))
	for _, a := range agents {
		if sum, cnt, ok := histogram(a.rig.reg, "pvrescue_container_remount_duration_seconds"); ok && cnt > 0 {
			s.Notes = append(s.Notes, fmt.Sprintf("%s: the agent's histogram pvrescue_container_remount_duration_seconds (host restore → last container fixed): mean %s over %d passes.",
				a.label(), Ms(time.Duration(sum/float64(cnt)*float64(time.Second))), cnt))
		}
	}
}

func (a *ctrAgent) label() string {
	if a.stacking {
		return "stacking (fallback forced)"
	}
	return "replace beneath (shipped)"
}

// startContainer starts c in a mount namespace of its own: the volume target (or its subPath)
// bound at c.data with c's propagation, the namespace's copies of the kubelet directories
// detached (a runtime's rootfs holds none), then it sleeps.
func (r *s3Rig) startContainer(ctx context.Context, c *benchContainer, kubelets []string) error {
	root := filepath.Dir(c.data)
	if err := os.MkdirAll(c.data, 0o755); err != nil {
		return err
	}
	ready := filepath.Join(root, "ready")
	if err := os.Remove(ready); err != nil && !os.IsNotExist(err) { // an earlier container's
		return err
	}
	src := r.target
	if c.target != "" {
		src = c.target
	}
	if c.src != "" {
		src = filepath.Join(src, c.src)
	}
	nsProp, bindProp := "private", "--make-private"
	if c.propagation == "HostToContainer" {
		nsProp, bindProp = "slave", "--make-rslave"
	}
	lines := []string{
		"mount --bind " + src + " " + c.data,
		"mount " + bindProp + " " + c.data,
	}
	for _, k := range kubelets {
		lines = append(lines, "umount -l "+k)
	}
	lines = append(lines, "touch "+ready, "exec sleep 3600")
	c.cmd = exec.Command("unshare", "-m", "--propagation", nsProp, "sh", "-ec", strings.Join(lines, "\n"))
	var out strings.Builder
	c.cmd.Stdout, c.cmd.Stderr = &out, &out
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("container %s: %w", c.name, err)
	}
	if err := testenv.WaitUntil(ctx, 10*time.Second, benchPoll, func() bool { _, err := os.Stat(ready); return err == nil }); err != nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
		return fmt.Errorf("container %s not set up: %w (%s)", c.name, err, strings.TrimSpace(out.String()))
	}
	return nil
}
