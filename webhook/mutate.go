package webhook

import (
	"encoding/json"
	"fmt"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// What a container can carry from pvrescue; the words used in the status annotation.
const (
	InjectedSharedVolume = "shared-volume"
	InjectedExecWrapper  = "exec-wrapper"
	InjectedProbe        = "liveness-probe"
	InjectedPropagation  = "propagation"
)

// Status is the JSON value of annotation pvrescue.io/status. It describes the pod's final state
// (what pvrescue pieces it carries), not the last call's actions, so re-mutation reproduces it.
type Status struct {
	// Guard lists the guarded devices as PATH=CLAIM; empty when the pod has no local block volume.
	Guard []string `json:"guard,omitempty"`
	// FakeDevicePolicy is the policy handed to the guard.
	FakeDevicePolicy string `json:"fakeDevicePolicy,omitempty"`
	// Install is true when the install init container copies the helper into the shared volume.
	Install bool `json:"install,omitempty"`
	// Containers lists, per user container, what it carries.
	Containers []ContainerStatus `json:"containers,omitempty"`
	// Skipped are volumes that could not be classified, and why.
	Skipped []SkippedVolume `json:"skipped,omitempty"`
}

// ContainerStatus is what one user container carries.
type ContainerStatus struct {
	Name     string   `json:"name"`
	Init     bool     `json:"init,omitempty"`
	Injected []string `json:"injected"`
}

// Result of Mutate.
type Result struct {
	// Status is nil when the pod was left untouched.
	Status   *Status
	Warnings []string
}

// Injected reports whether the pod carries anything from pvrescue.
func (r Result) Injected() bool {
	return r.Status != nil && (len(r.Status.Guard) > 0 || r.Status.Install || len(r.Status.Containers) > 0)
}

type device struct{ volume, path, claim string }

// Mutate applies the injection to pod for the given classification. It is pure (no API access) and
// idempotent: Mutate on its own output changes nothing. It never removes what it did not add.
func Mutate(pod *corev1.Pod, cls Classification, cfg *config.Config) Result {
	var warnings []string
	warnf := func(format string, args ...any) {
		warnings = append(warnings, "pvrescue: "+fmt.Sprintf(format, args...))
	}
	for _, s := range cls.Skipped {
		warnf("volume %q skipped: %s", s.Volume, s.Reason)
	}

	mp := cfg.Helper.MountPath
	helper := path.Join(mp, contract.HelperBinDir, contract.HelperBinaryName)
	ann := pod.Annotations

	for _, v := range pod.Spec.Volumes {
		if v.Name == contract.VolumeName && v.EmptyDir == nil {
			warnf("pod already has a volume named %q that is not an emptyDir; nothing injected", contract.VolumeName)
			return Result{Warnings: warnings}
		}
	}

	policy := contract.PolicyFilter
	if v, ok := ann[contract.AnnotationFakeDevicePolicy]; ok {
		switch v {
		case contract.PolicyFilter, contract.PolicyRequire:
			policy = v
		default:
			warnf("annotation %s=%q is not %q or %q; using %q", contract.AnnotationFakeDevicePolicy, v,
				contract.PolicyFilter, contract.PolicyRequire, contract.PolicyFilter)
		}
	}
	probeOn := cfg.S3.LivenessProbe && ann[contract.AnnotationInjectProbe] != "false"
	propOn := cfg.S3.MountPropagation && ann[contract.AnnotationInjectPropagation] != "false"
	wrapOn := ann[contract.AnnotationExecWrapper] != "false"

	// Our own init containers are set aside and rebuilt, so a second pass sees the user's only.
	var existingGuard, existingInstall *corev1.Container
	userInit := make([]corev1.Container, 0, len(pod.Spec.InitContainers))
	for i := range pod.Spec.InitContainers {
		c := pod.Spec.InitContainers[i]
		switch c.Name {
		case contract.GuardContainerName:
			existingGuard = &c
		case contract.InstallContainerName:
			existingInstall = &c
		default:
			userInit = append(userInit, c)
		}
	}

	// The union of local block devices over every container, in pod order.
	var devs []device
	seen := map[string]bool{}
	for _, cs := range [][]corev1.Container{userInit, pod.Spec.Containers} {
		for _, c := range cs {
			for _, vd := range c.VolumeDevices {
				if !cls.Is(vd.Name, KindLocalBlock) || seen[vd.DevicePath] {
					continue
				}
				seen[vd.DevicePath] = true
				devs = append(devs, device{volume: vd.Name, path: vd.DevicePath, claim: cls.Volumes[vd.Name].Claim})
			}
		}
	}
	guard := len(devs) > 0

	p := containerPass{cls: cls, cfg: cfg, helper: helper, guard: guard, probeOn: probeOn, propOn: propOn, wrapOn: wrapOn, warnf: warnf}
	var statuses []ContainerStatus
	for i := range userInit {
		if st := p.container(&userInit[i], true); st != nil {
			statuses = append(statuses, *st)
		}
	}
	for i := range pod.Spec.Containers {
		if st := p.container(&pod.Spec.Containers[i], false); st != nil {
			statuses = append(statuses, *st)
		}
	}

	install := guard || p.needsHelper
	var ours []corev1.Container
	if guard {
		ours = append(ours, ownContainer(existingGuard, guardContainer(cfg, pod.Spec.SecurityContext, devs, policy)))
	}
	if install {
		ours = append(ours, ownContainer(existingInstall, installContainer(cfg, pod.Spec.SecurityContext)))
	}
	// Keep a nil slice nil, so a pod without init containers round-trips unchanged.
	if len(ours) > 0 || len(userInit) != len(pod.Spec.InitContainers) {
		pod.Spec.InitContainers = append(ours, userInit...)
		if len(pod.Spec.InitContainers) == 0 {
			pod.Spec.InitContainers = nil
		}
	}

	if guard || p.mounted {
		has := false
		for _, v := range pod.Spec.Volumes {
			has = has || v.Name == contract.VolumeName
		}
		if !has {
			pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
				Name:         contract.VolumeName,
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			})
		}
	}

	st := &Status{Install: install, Containers: statuses, Skipped: cls.Skipped}
	if guard {
		st.FakeDevicePolicy = policy
		for _, d := range devs {
			st.Guard = append(st.Guard, d.path+"="+d.claim)
		}
	}
	res := Result{Status: st, Warnings: warnings}
	if !res.Injected() && len(cls.Skipped) == 0 {
		return Result{Warnings: warnings}
	}
	raw, err := json.Marshal(st)
	if err != nil {
		// A struct of strings always marshals; keep the pod valid regardless.
		warnf("cannot record status: %v", err)
		return Result{Status: st, Warnings: warnings}
	}
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[contract.AnnotationStatus] = string(raw)
	return res
}

// containerPass mutates user containers one by one and remembers what the pod needs as a whole.
type containerPass struct {
	cls                     Classification
	cfg                     *config.Config
	helper                  string
	guard                   bool
	probeOn, propOn, wrapOn bool
	warnf                   func(string, ...any)

	needsHelper bool // some container runs the installed helper (wrapper or probe)
	mounted     bool // some container mounts the shared volume
}

func (p *containerPass) container(c *corev1.Container, init bool) *ContainerStatus {
	kind := "container"
	if init {
		kind = "init container"
	}
	usesDevices := false
	for _, vd := range c.VolumeDevices {
		usesDevices = usesDevices || p.cls.Is(vd.Name, KindLocalBlock)
	}
	var s3Mounts []int
	for i, m := range c.VolumeMounts {
		if p.cls.Is(m.Name, KindS3) {
			s3Mounts = append(s3Mounts, i)
		}
	}

	// Where the shared volume is (or would be) mounted, and whether its path is taken.
	mountState := p.sharedMount(c)
	if mountState == mountConflict && (usesDevices && p.guard || len(s3Mounts) > 0) {
		p.warnf("%s %q already mounts something at %s; pvrescue wrapper and probe not added to it", kind, c.Name, p.cfg.Helper.MountPath)
	}
	canMount := mountState != mountConflict

	var injected []string
	wantMount := false

	if p.guard && usesDevices && p.wrapOn && canMount {
		switch {
		case isWrapped(c.Command, p.helper):
			injected = append(injected, InjectedExecWrapper)
		case len(c.Command) > 0:
			wrapped := []string{p.helper, contract.CmdExec, contract.FlagDevicesFile, path.Join(p.cfg.Helper.MountPath, contract.DevicesFile), "--"}
			c.Command = append(wrapped, c.Command...)
			injected = append(injected, InjectedExecWrapper)
		default:
			p.warnf("%s %q has no explicit command, so fake devices stay in /dev; use the real ones listed in %s/ (or %s)",
				kind, c.Name, path.Join(p.cfg.Helper.MountPath, contract.FilteredDevDir), path.Join(p.cfg.Helper.MountPath, contract.DevicesFile))
		}
	}

	if !init && p.probeOn && len(s3Mounts) > 0 && canMount {
		switch {
		case c.LivenessProbe == nil || isOurProbe(c.LivenessProbe, p.helper):
			paths := make([]string, 0, len(s3Mounts))
			for _, i := range s3Mounts {
				paths = append(paths, c.VolumeMounts[i].MountPath)
			}
			c.LivenessProbe = probe(p.cfg, p.helper, paths)
			injected = append(injected, InjectedProbe)
		default:
			p.warnf("container %q already has a livenessProbe; pvrescue's S3 mount probe not added", c.Name)
		}
	}
	if len(injected) > 0 {
		p.needsHelper = true
		wantMount = true
	}
	if p.guard && !init && canMount {
		// Every app container of a guarded pod sees the guard's report and filtered /dev view.
		wantMount = true
	}
	if wantMount {
		if mountState == mountAbsent {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: contract.VolumeName, MountPath: p.cfg.Helper.MountPath, ReadOnly: true})
		}
		p.mounted = true
		injected = append([]string{InjectedSharedVolume}, injected...)
	}

	if p.propOn {
		set := false
		for _, i := range s3Mounts {
			m := &c.VolumeMounts[i]
			switch {
			case m.MountPropagation == nil:
				hc := corev1.MountPropagationHostToContainer
				m.MountPropagation = &hc
				set = true
			case *m.MountPropagation == corev1.MountPropagationHostToContainer:
				set = true
			case *m.MountPropagation == corev1.MountPropagationNone:
				p.warnf("%s %q mounts S3 volume %q with mountPropagation None; a restored mount reaches it only after a restart", kind, c.Name, m.Name)
			}
		}
		if set {
			injected = append(injected, InjectedPropagation)
		}
	}

	if len(injected) == 0 {
		return nil
	}
	return &ContainerStatus{Name: c.Name, Init: init, Injected: injected}
}

type mountState int

const (
	mountAbsent mountState = iota
	mountPresent
	mountConflict
)

func (p *containerPass) sharedMount(c *corev1.Container) mountState {
	for _, m := range c.VolumeMounts {
		if m.Name == contract.VolumeName {
			return mountPresent
		}
	}
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == path.Clean(p.cfg.Helper.MountPath) {
			return mountConflict
		}
	}
	return mountAbsent
}

func isWrapped(cmd []string, helper string) bool {
	return len(cmd) >= 2 && cmd[0] == helper && cmd[1] == contract.CmdExec
}

func isOurProbe(pr *corev1.Probe, helper string) bool {
	return pr.Exec != nil && len(pr.Exec.Command) >= 2 && pr.Exec.Command[0] == helper && pr.Exec.Command[1] == contract.CmdProbe
}

func probe(cfg *config.Config, helper string, paths []string) *corev1.Probe {
	pc := cfg.S3.Probe
	cmd := append([]string{helper, contract.CmdProbe, contract.FlagTimeout, pc.StatfsTimeout.Duration.String()}, paths...)
	return &corev1.Probe{
		ProbeHandler:        corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: cmd}},
		InitialDelaySeconds: pc.InitialDelaySeconds,
		PeriodSeconds:       pc.PeriodSeconds,
		TimeoutSeconds:      pc.TimeoutSeconds,
		FailureThreshold:    pc.FailureThreshold,
		// The API server's default, set here so a re-mutation compares equal.
		SuccessThreshold: 1,
	}
}

func sharedMount(cfg *config.Config) corev1.VolumeMount {
	return corev1.VolumeMount{Name: contract.VolumeName, MountPath: cfg.Helper.MountPath}
}

// securityContext satisfies Pod Security "restricted" on its own: non-root, no privilege
// escalation, no capabilities, RuntimeDefault seccomp, read-only root. The user is the pod's when
// the pod names a non-root one (policies may pin the pod's user range), else the helper image's.
func securityContext(cfg *config.Config, pod *corev1.PodSecurityContext) *corev1.SecurityContext {
	sc := &corev1.SecurityContext{
		RunAsNonRoot:             ptr.To(true),
		AllowPrivilegeEscalation: ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if pod == nil || pod.RunAsUser == nil || *pod.RunAsUser == 0 {
		sc.RunAsUser = ptr.To(cfg.Helper.RunAsUser)
	}
	return sc
}

func helperContainer(cfg *config.Config, pod *corev1.PodSecurityContext, name string, args []string) corev1.Container {
	return corev1.Container{
		Name:            name,
		Image:           cfg.Helper.Image,
		ImagePullPolicy: corev1.PullPolicy(cfg.Helper.ImagePullPolicy),
		Command:         []string{contract.HelperBinaryInImage},
		Args:            args,
		VolumeMounts:    []corev1.VolumeMount{sharedMount(cfg)},
		Resources:       cfg.Helper.Resources.Requirements(),
		SecurityContext: securityContext(cfg, pod),
		// The API server's defaults, set here so a re-mutation compares equal; the guard's summary
		// goes to this file so `kubectl describe pod` shows it.
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
}

func guardContainer(cfg *config.Config, pod *corev1.PodSecurityContext, devs []device, policy string) corev1.Container {
	args := []string{contract.CmdGuard}
	vds := make([]corev1.VolumeDevice, 0, len(devs))
	for _, d := range devs {
		args = append(args, contract.FlagDevice, d.path+"="+d.claim)
		vds = append(vds, corev1.VolumeDevice{Name: d.volume, DevicePath: d.path})
	}
	args = append(args, contract.FlagPolicy, policy, contract.FlagOut, cfg.Helper.MountPath,
		contract.FlagFakeSize, strconv.FormatInt(cfg.LocalBlock.FakeDeviceSizeBytes, 10))
	c := helperContainer(cfg, pod, contract.GuardContainerName, args)
	c.VolumeDevices = vds
	return c
}

func installContainer(cfg *config.Config, pod *corev1.PodSecurityContext) corev1.Container {
	return helperContainer(cfg, pod, contract.InstallContainerName,
		[]string{contract.CmdInstall, contract.FlagTo, path.Join(cfg.Helper.MountPath, contract.HelperBinDir)})
}

// ownContainer refreshes the fields pvrescue owns on a container it injected earlier and keeps
// whatever else the API server or another webhook set on it.
func ownContainer(existing *corev1.Container, fresh corev1.Container) corev1.Container {
	if existing == nil {
		return fresh
	}
	c := *existing
	c.Image, c.ImagePullPolicy = fresh.Image, fresh.ImagePullPolicy
	c.Command, c.Args = fresh.Command, fresh.Args
	c.VolumeMounts, c.VolumeDevices = fresh.VolumeMounts, fresh.VolumeDevices
	c.Resources, c.SecurityContext = fresh.Resources, fresh.SecurityContext
	return c
}
