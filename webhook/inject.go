package webhook

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// What a container can carry from pvrescue; the words used in the status annotation.
const (
	InjectedSharedVolume = "shared-volume"
	InjectedExecWrapper  = "exec-wrapper"
	InjectedProbe        = "liveness-probe"
	InjectedPropagation  = "propagation"
	// SkippedGuard is the Skip.What of a container whose devices no guard can check.
	SkippedGuard = "guard"
)

// Inject injects the guard, the helper, the S3 mount probe and mount propagation into pod for
// the given classification, and returns what it did with the JSON patch of those operations.
//
// It first decides everything on copies, then applies the operations to pod (so a pod it leaves
// alone is never touched). It is pure (no API access) and idempotent: Inject on its own output
// records no operation. It never edits or removes what it did not add; its own init containers
// are recognised by the contract.EnvInjected marker, never by name alone.
func Inject(pod *corev1.Pod, cls Classification, cfg *config.Config) Injection {
	in := newInjector(pod, cls, cfg)
	in.applying = true
	in.decide()
	in.apply()
	return in.res
}

// Decide is Inject without the last step: the same Injection, the pod left as it was. It is
// what an admission needs (the answer is the patch) and spares it building the mutated pod. The
// values in the patch may share maps with cfg: they are for encoding, not for editing.
func Decide(pod *corev1.Pod, cls Classification, cfg *config.Config) Injection {
	in := newInjector(pod, cls, cfg)
	in.decide()
	if len(in.patch) > 0 {
		in.res.Patch = in.patch
	}
	return in.res
}

type device struct{ volume, path, claim string }

// guardPlan is one guard init container: what it checks, where it reports, whom it serves.
type guardPlan struct {
	name   string
	out    string
	devs   []device
	serves []string
}

// userContainer is a copy of one of the pod's own containers, edited while deciding.
type userContainer struct {
	c     corev1.Container
	init  bool
	index int    // in pod.Spec.InitContainers or pod.Spec.Containers
	ptr   string // JSON pointer of the container in the request's object
	devs  []device
	guard *guardPlan
}

type ownContainer struct {
	index int
	role  string
	c     corev1.Container
}

type injector struct {
	pod    *corev1.Pod
	cls    Classification
	cfg    *config.Config
	mp     string // where the shared volume is mounted
	helper string // the installed helper's path

	policy                  string
	probeOn, propOn, wrapOn bool

	taken     map[string]bool // container names of the pod that are not ours
	ours      []ownContainer  // our init containers, by marker
	users     []*userContainer
	volume    string // the shared volume's name
	hasVolume bool   // the pod already has it
	guards    []*guardPlan

	res   Injection
	patch patch
	// applying is set when the decisions are applied to pod (Inject): only then are the final
	// init containers and the apply steps built, and the helper containers get maps of their own.
	applying bool
	initOut  []corev1.Container // the final init containers, when they change
	applyFn  []func()
}

func newInjector(pod *corev1.Pod, cls Classification, cfg *config.Config) *injector {
	mp := cfg.Helper.MountPath
	in := &injector{
		pod: pod, cls: cls, cfg: cfg, mp: mp,
		helper: path.Join(mp, contract.HelperBinDir, contract.HelperBinaryName),
		taken:  map[string]bool{},
	}
	for _, s := range cls.Skipped {
		in.skip(Skip{Volume: s.Volume, Reason: s.Reason}, "volume %q skipped: %s", s.Volume, s.Reason)
	}
	return in
}

func (in *injector) warnf(format string, args ...any) {
	in.res.Warnings = append(in.res.Warnings, "pvrescue: "+fmt.Sprintf(format, args...))
}

// skip records s in the status annotation and warns with the same words.
func (in *injector) skip(s Skip, format string, args ...any) {
	in.warnf(format, args...)
	if s.Reason == "" {
		s.Reason = fmt.Sprintf(format, args...)
	}
	in.res.Skipped = append(in.res.Skipped, s)
}

func (in *injector) decide() {
	ann := in.pod.Annotations
	in.policy = contract.PolicyFilter
	if v, ok := ann[contract.AnnotationFakeDevicePolicy]; ok {
		switch v {
		case contract.PolicyFilter, contract.PolicyRequire:
			in.policy = v
		default:
			in.warnf("annotation %s=%q is not %q or %q; using %q", contract.AnnotationFakeDevicePolicy, v,
				contract.PolicyFilter, contract.PolicyRequire, contract.PolicyFilter)
		}
	}
	in.probeOn = in.cfg.S3.LivenessProbe && ann[contract.AnnotationInjectProbe] != "false"
	in.propOn = in.cfg.S3.MountPropagation && ann[contract.AnnotationInjectPropagation] != "false"
	in.wrapOn = ann[contract.AnnotationExecWrapper] != "false"

	in.findContainers()
	in.chooseVolume()
	in.planGuards()
	for _, u := range in.users {
		in.container(u)
	}
	in.initContainers()
	in.sharedVolume()
	in.status()
}

// findContainers sorts the pod's containers into ours (marked) and the user's.
func (in *injector) findContainers() {
	spec := &in.pod.Spec
	for i, c := range spec.InitContainers {
		if role := roleOf(c); role != "" {
			in.ours = append(in.ours, ownContainer{index: i, role: role, c: c})
			continue
		}
		in.taken[c.Name] = true
		in.users = append(in.users, &userContainer{c: c, init: true, index: i, ptr: "/spec/initContainers/" + strconv.Itoa(i)})
	}
	for i, c := range spec.Containers {
		in.taken[c.Name] = true
		in.users = append(in.users, &userContainer{c: c, index: i, ptr: "/spec/containers/" + strconv.Itoa(i)})
	}
	for _, c := range spec.EphemeralContainers {
		in.taken[c.Name] = true
	}
	for _, u := range in.users {
		seen := map[device]bool{}
		for _, vd := range u.c.VolumeDevices {
			d := device{volume: vd.Name, path: vd.DevicePath, claim: in.cls.Volumes[vd.Name].Claim}
			if in.cls.Is(vd.Name, KindLocalBlock) && !seen[d] {
				seen[d] = true
				u.devs = append(u.devs, d)
			}
		}
	}
}

func roleOf(c corev1.Container) string {
	for _, e := range c.Env {
		if e.Name == contract.EnvInjected && (e.Value == contract.RoleGuard || e.Value == contract.RoleInstall) {
			return e.Value
		}
	}
	return ""
}

// chooseVolume finds our shared volume (named in our status annotation) or picks a free name.
func (in *injector) chooseVolume() {
	var prior struct {
		Volume string `json:"volume"`
	}
	if raw, ok := in.pod.Annotations[contract.AnnotationStatus]; ok {
		_ = json.Unmarshal([]byte(raw), &prior) // not ours or unreadable: no prior volume
	}
	names := map[string]bool{}
	for _, v := range in.pod.Spec.Volumes {
		names[v.Name] = true
		if prior.Volume != "" && v.Name == prior.Volume && v.EmptyDir != nil {
			in.volume, in.hasVolume = v.Name, true
		}
	}
	if !in.hasVolume {
		in.volume = freeName(contract.VolumeName, names)
	}
	if in.volume != contract.VolumeName && names[contract.VolumeName] {
		in.warnf("the pod has its own volume named %q; pvrescue's shared volume is %q", contract.VolumeName, in.volume)
	}
}

// freeName is base, else the first of base-2, base-3, … not in taken.
func freeName(base string, taken map[string]bool) string {
	name := base
	for i := 2; taken[name]; i++ {
		name = base + "-" + strconv.Itoa(i)
	}
	return name
}

// planGuards gives every device mapped from a local block claim a guard that checks it. One
// guard serves the whole pod when the union of the containers' devices is consistent (each claim
// at one path, each path and file name one claim's); otherwise each container gets its own.
func (in *injector) planGuards() {
	var union []device
	var users []*userContainer
	seen := map[device]bool{}
	for _, u := range in.users {
		if len(u.devs) == 0 {
			continue
		}
		users = append(users, u)
		for _, d := range u.devs {
			if !seen[d] {
				seen[d] = true
				union = append(union, d)
			}
		}
	}
	if len(union) == 0 {
		return
	}
	if consistent(union) == "" {
		g := &guardPlan{out: in.mp, devs: union}
		for _, u := range users {
			u.guard = g
		}
		in.guards = []*guardPlan{g}
	} else {
		for _, u := range users {
			if why := consistent(u.devs); why != "" {
				kind := kindOf(u.init)
				in.skip(Skip{Container: u.c.Name, What: SkippedGuard}, "%s %q: no guard checks its devices: %s", kind, u.c.Name, why)
				continue
			}
			g := &guardPlan{devs: u.devs, serves: []string{u.c.Name}}
			u.guard = g
			in.guards = append(in.guards, g)
		}
	}
	// Names: those of our guards from an earlier pass, in order, then free ones.
	var existing []string
	for _, o := range in.ours {
		if o.role == contract.RoleGuard {
			existing = append(existing, o.c.Name)
		}
	}
	used := map[string]bool{}
	for k := range in.taken {
		used[k] = true
	}
	for i, g := range in.guards {
		if i < len(existing) && !used[existing[i]] {
			g.name = existing[i]
		} else {
			g.name = freeName(contract.GuardContainerName, used)
		}
		used[g.name] = true
		if len(in.guards) > 1 {
			g.out = path.Join(in.mp, g.name)
		}
	}
	if len(in.guards) > 0 && in.taken[contract.GuardContainerName] {
		in.warnf("the pod has its own container named %q; pvrescue's guard runs as %q", contract.GuardContainerName, in.guards[0].name)
	}
}

// consistent says why devs cannot share one guard ("" when they can).
func consistent(devs []device) string {
	byVolume, byPath, byBase := map[string]string{}, map[string]string{}, map[string]string{}
	for _, d := range devs {
		if p, ok := byVolume[d.volume]; ok && p != d.path {
			return fmt.Sprintf("volume %q is mapped at both %s and %s", d.volume, p, d.path)
		}
		if v, ok := byPath[d.path]; ok && v != d.volume {
			return fmt.Sprintf("%s is the path of both volume %q and volume %q", d.path, v, d.volume)
		}
		base := path.Base(d.path)
		if p, ok := byBase[base]; ok && p != d.path {
			return fmt.Sprintf("%s and %s share the file name %q in the guard's %s/ view", p, d.path, base, contract.FilteredDevDir)
		}
		byVolume[d.volume], byPath[d.path], byBase[base] = d.path, d.volume, d.path
	}
	return ""
}

func kindOf(init bool) string {
	if init {
		return "init container"
	}
	return "container"
}

// container decides what one user container gets, on its copy, recording the operations.
func (in *injector) container(u *userContainer) {
	c := &u.c
	kind := kindOf(u.init)
	var s3Mounts []int
	for i, m := range c.VolumeMounts {
		if in.cls.Is(m.Name, KindS3) {
			s3Mounts = append(s3Mounts, i)
		}
	}
	// The shared volume mounted already, and any mount of the pod's own at or under its path:
	// one at the path takes it, one below hides the helper or the guard's report.
	mounted := false
	var hiding *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if m.Name == in.volume && in.hasVolume {
			mounted = true
		} else if p := path.Clean(m.MountPath); p == path.Clean(in.mp) || isUnder(p, in.mp) {
			hiding = m
		}
	}
	canMount := hiding == nil || path.Clean(hiding.MountPath) != path.Clean(in.mp)
	wantWrap := u.guard != nil && in.wrapOn
	wantProbe := !u.init && in.probeOn && len(s3Mounts) > 0
	if hiding != nil && (wantWrap || wantProbe) {
		reason := fmt.Sprintf("%s %q mounts volume %q at %s, which hides pvrescue's helper and files under %s", kind, c.Name, hiding.Name, hiding.MountPath, in.mp)
		if wantWrap {
			in.skip(Skip{Container: c.Name, What: InjectedExecWrapper, Reason: reason}, "%s; exec wrapper not added", reason)
		}
		if wantProbe {
			in.skip(Skip{Container: c.Name, What: InjectedProbe, Reason: reason}, "%s; S3 mount probe not added", reason)
		}
		wantWrap, wantProbe = false, false
	}

	var injected []string
	if wantWrap {
		devicesFile := path.Join(u.guard.out, contract.DevicesFile)
		switch cmd := unwrap(c.Command, in.helper); {
		case len(cmd) > 0:
			wrapped := append([]string{in.helper, contract.CmdExec, contract.FlagDevicesFile, devicesFile, "--"}, cmd...)
			if !equality.Semantic.DeepEqual(wrapped, c.Command) {
				c.Command = wrapped
				in.patch.replace(u.ptr+"/command", wrapped)
			}
			injected = append(injected, InjectedExecWrapper)
		default:
			in.skip(Skip{Container: c.Name, What: InjectedExecWrapper, Reason: "no explicit command"},
				"%s %q has no explicit command, so fake devices stay in /dev; use the real ones listed in %s/ (or %s)",
				kind, c.Name, path.Join(u.guard.out, contract.FilteredDevDir), devicesFile)
		}
	}
	if wantProbe {
		paths := make([]string, 0, len(s3Mounts))
		for _, i := range s3Mounts {
			paths = append(paths, c.VolumeMounts[i].MountPath)
		}
		switch want := probe(in.cfg, in.helper, paths); {
		case c.LivenessProbe == nil || isOurProbe(c.LivenessProbe, in.helper):
			if !equality.Semantic.DeepEqual(want, c.LivenessProbe) {
				c.LivenessProbe = want
				in.patch.add(u.ptr+"/livenessProbe", want)
			}
			injected = append(injected, InjectedProbe)
		default:
			in.skip(Skip{Container: c.Name, What: InjectedProbe, Reason: "the container has its own livenessProbe"},
				"container %q already has a livenessProbe; pvrescue's S3 mount probe not added", c.Name)
		}
	}
	// Every app container of a guarded pod sees the guards' reports and filtered /dev views.
	wantMount := len(injected) > 0 || (!u.init && len(in.guards) > 0)
	if wantMount && canMount {
		if !mounted {
			m := corev1.VolumeMount{Name: in.volume, MountPath: in.mp, ReadOnly: true}
			in.patch.appendTo(u.ptr+"/volumeMounts", len(c.VolumeMounts), m)
			if in.keepsEdits(u) {
				c.VolumeMounts = append(c.VolumeMounts[:len(c.VolumeMounts):len(c.VolumeMounts)], m)
			}
		}
		injected = append([]string{InjectedSharedVolume}, injected...)
	}
	if in.propOn && in.propagation(u, s3Mounts) {
		injected = append(injected, InjectedPropagation)
	}
	if len(injected) == 0 {
		return
	}
	in.res.Containers = append(in.res.Containers, ContainerStatus{Name: c.Name, Init: u.init, Injected: injected})
	if !in.applying {
		return
	}
	i := u.index
	if u.init {
		in.applyFn = append(in.applyFn, func() { in.pod.Spec.InitContainers[i] = u.c })
	} else {
		in.applyFn = append(in.applyFn, func() { in.pod.Spec.Containers[i] = u.c })
	}
}

// keepsEdits says whether u's copy must carry the edits recorded for it: when they are applied
// to the pod, and for an init container, which goes whole into the patch when pvrescue's init
// containers are rebuilt around it. Otherwise only the patch records them.
func (in *injector) keepsEdits(u *userContainer) bool { return in.applying || u.init }

// propagation sets HostToContainer on the S3 mounts that leave it unset, so a restored mount
// reaches a running container; it reports whether any S3 mount of the container has it.
func (in *injector) propagation(u *userContainer, s3Mounts []int) bool {
	c := &u.c
	set, copied := false, false
	for _, i := range s3Mounts {
		m := c.VolumeMounts[i]
		switch {
		case m.MountPropagation == nil && m.ReadOnly:
			// A mount that propagates into a read-only volume mount arrives with the host mount's
			// flags (read-write): Kubernetes makes read-only recursive only without propagation.
			// The agent puts the restored mount into such a container itself, read-only.
			in.skip(Skip{Container: c.Name, What: InjectedPropagation, Reason: fmt.Sprintf("volume %q is mounted read-only; HostToContainer would make a restored mount writable", m.Name)},
				"%s %q mounts S3 volume %q read-only; mountPropagation left unset so it stays read-only", kindOf(u.init), c.Name, m.Name)
		case m.MountPropagation == nil:
			hc := corev1.MountPropagationHostToContainer
			in.patch.add(u.ptr+"/volumeMounts/"+strconv.Itoa(i)+"/mountPropagation", hc)
			set = true
			if !in.keepsEdits(u) {
				continue
			}
			if !copied {
				c.VolumeMounts = append([]corev1.VolumeMount(nil), c.VolumeMounts...)
				copied = true
			}
			c.VolumeMounts[i].MountPropagation = &hc
		case *m.MountPropagation == corev1.MountPropagationHostToContainer:
			set = true
		case *m.MountPropagation == corev1.MountPropagationNone:
			in.skip(Skip{Container: c.Name, What: InjectedPropagation, Reason: fmt.Sprintf("volume %q is mounted with mountPropagation None", m.Name)},
				"%s %q mounts S3 volume %q with mountPropagation None; a restored mount reaches it when the agent remounts it in the container, not by propagation", kindOf(u.init), c.Name, m.Name)
		}
	}
	return set
}

func isUnder(p, dir string) bool {
	dir = path.Clean(dir)
	return len(p) > len(dir) && p[:len(dir)] == dir && (dir == "/" || p[len(dir)] == '/')
}

// unwrap returns the user's own command: cmd without pvrescue's exec wrapper.
func unwrap(cmd []string, helper string) []string {
	if len(cmd) < 2 || cmd[0] != helper || cmd[1] != contract.CmdExec {
		return cmd
	}
	for i, a := range cmd {
		if a == "--" {
			return cmd[i+1:]
		}
	}
	return cmd
}

func isOurProbe(pr *corev1.Probe, helper string) bool {
	return pr.Exec != nil && len(pr.Exec.Command) >= 2 && pr.Exec.Command[0] == helper && pr.Exec.Command[1] == contract.CmdProbe
}

// initContainers records the operations that put our init containers first: inserted on a first
// pass, refreshed in place on a later one, rebuilt when the set we need changed.
func (in *injector) initContainers() {
	want := make([]corev1.Container, 0, len(in.guards)+1) // the guards and the install
	for _, g := range in.guards {
		want = append(want, guardContainer(in.cfg, in.pod.Spec.SecurityContext, in.volume, g, in.policy, in.applying))
	}
	// The helper is installed for the wrapper and the probe, and beside every guard.
	install := len(in.guards) > 0
	for _, cs := range in.res.Containers {
		for _, w := range cs.Injected {
			install = install || w == InjectedExecWrapper || w == InjectedProbe
		}
	}
	if install {
		name := ""
		for _, o := range in.ours {
			if o.role == contract.RoleInstall && !in.taken[o.c.Name] && !slices.ContainsFunc(want, func(c corev1.Container) bool { return c.Name == o.c.Name }) {
				name = o.c.Name
			}
		}
		if name == "" {
			used := map[string]bool{}
			for k := range in.taken {
				used[k] = true
			}
			for _, c := range want {
				used[c.Name] = true
			}
			name = freeName(contract.InstallContainerName, used)
		}
		want = append(want, installContainer(in.cfg, in.pod.Spec.SecurityContext, in.volume, name, in.applying))
		in.res.Install = name
		if in.taken[contract.InstallContainerName] {
			in.warnf("the pod has its own container named %q; pvrescue's install runs as %q", contract.InstallContainerName, name)
		}
	}

	init := in.pod.Spec.InitContainers
	userInit := func() []corev1.Container {
		var out []corev1.Container
		for _, u := range in.users {
			if u.init {
				out = append(out, u.c)
			}
		}
		return out
	}
	switch {
	case len(in.ours) == 0 && len(want) == 0:
		return
	case len(in.ours) == 0:
		if len(init) == 0 {
			in.patch.add("/spec/initContainers", want)
		} else {
			for i, c := range want {
				in.patch.add("/spec/initContainers/"+strconv.Itoa(i), c)
			}
		}
		if in.applying {
			in.initOut = append(want, userInit()...)
		}
	case sameNames(in.ours, want):
		// A later pass: refresh the fields we own where they drifted, in place.
		out := append([]corev1.Container(nil), init...)
		for _, u := range in.users {
			if u.init {
				out[u.index] = u.c
			}
		}
		for i, o := range in.ours {
			c := refresh(o.c, want[i])
			if !equality.Semantic.DeepEqual(c, o.c) {
				in.patch.replace("/spec/initContainers/"+strconv.Itoa(o.index), c)
			}
			out[o.index] = c
		}
		in.initOut = out
	default:
		for i := range want {
			for _, o := range in.ours {
				if o.c.Name == want[i].Name && o.role == roleOf(want[i]) {
					want[i] = refresh(o.c, want[i])
				}
			}
		}
		out := append(want, userInit()...)
		if len(out) == 0 {
			in.patch.remove("/spec/initContainers")
			out = nil
		} else {
			in.patch.replace("/spec/initContainers", out)
		}
		in.initOut = out
	}
	if in.applying {
		in.applyFn = append(in.applyFn, func() { in.pod.Spec.InitContainers = in.initOut })
	}
}

func sameNames(ours []ownContainer, want []corev1.Container) bool {
	if len(ours) != len(want) {
		return false
	}
	for i := range ours {
		if ours[i].c.Name != want[i].Name || ours[i].role != roleOf(want[i]) {
			return false
		}
	}
	return true
}

// refresh sets the fields pvrescue owns on a container it injected earlier and keeps whatever
// else the API server or another webhook set on it.
func refresh(existing, fresh corev1.Container) corev1.Container {
	c := existing
	c.Image, c.ImagePullPolicy = fresh.Image, fresh.ImagePullPolicy
	c.Command, c.Args, c.Env = fresh.Command, fresh.Args, fresh.Env
	c.VolumeMounts, c.VolumeDevices = fresh.VolumeMounts, fresh.VolumeDevices
	c.Resources, c.SecurityContext = fresh.Resources, fresh.SecurityContext
	return c
}

// sharedVolume adds the emptyDir when anything uses it and the pod lacks it.
func (in *injector) sharedVolume() {
	used := len(in.guards) > 0
	for _, cs := range in.res.Containers {
		used = used || cs.Injected[0] == InjectedSharedVolume
	}
	if !used {
		return
	}
	in.res.Volume = in.volume
	if in.hasVolume {
		return
	}
	v := corev1.Volume{Name: in.volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
	in.patch.appendTo("/spec/volumes", len(in.pod.Spec.Volumes), v)
	if in.applying {
		in.applyFn = append(in.applyFn, func() { in.pod.Spec.Volumes = append(in.pod.Spec.Volumes, v) })
	}
}

// status records the pod's final state in the status annotation when there is anything to say.
func (in *injector) status() {
	if len(in.guards) > 0 {
		in.res.FakeDevicePolicy = in.policy
		for _, g := range in.guards {
			rec := Guard{Container: g.name, Devices: deviceArgs(g.devs)}
			if len(in.guards) > 1 {
				rec.Out, rec.For = g.out, g.serves
			}
			in.res.Guards = append(in.res.Guards, rec)
		}
	}
	if !in.res.Injected() && len(in.res.Skipped) == 0 {
		return
	}
	raw, err := json.Marshal(&in.res)
	if err != nil {
		// A struct of strings always marshals; keep the pod valid regardless.
		in.warnf("cannot record status: %v", err)
		return
	}
	val := string(raw)
	if cur, ok := in.pod.Annotations[contract.AnnotationStatus]; ok && cur == val {
		return
	}
	if in.pod.Annotations == nil {
		in.patch.add("/metadata/annotations", map[string]string{contract.AnnotationStatus: val})
	} else {
		in.patch.add("/metadata/annotations/"+escape(contract.AnnotationStatus), val)
	}
	if !in.applying {
		return
	}
	in.applyFn = append(in.applyFn, func() {
		if in.pod.Annotations == nil {
			in.pod.Annotations = map[string]string{}
		}
		in.pod.Annotations[contract.AnnotationStatus] = val
	})
}

// apply performs the decided operations on the pod; nothing decided, nothing touched.
func (in *injector) apply() {
	if len(in.patch) == 0 {
		return
	}
	for _, f := range in.applyFn {
		f()
	}
	in.res.Patch = in.patch
}

func deviceArgs(devs []device) []string {
	out := make([]string, 0, len(devs))
	for _, d := range devs {
		out = append(out, d.path+"="+d.claim)
	}
	return out
}
