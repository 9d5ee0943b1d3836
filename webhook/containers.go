package webhook

import (
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// The pieces Inject adds: the guard and install init containers and the S3 mount probe.

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

// helperContainer is one of pvrescue's init containers. Its resource maps are the
// configuration's own unless owned is set (the container goes into a pod someone may edit).
func helperContainer(cfg *config.Config, pod *corev1.PodSecurityContext, name, role string, args []string, owned bool) corev1.Container {
	resources := corev1.ResourceRequirements{Requests: cfg.Helper.Resources.Requests, Limits: cfg.Helper.Resources.Limits}
	if owned {
		resources = cfg.Helper.Resources.Requirements()
	}
	return corev1.Container{
		Name:            name,
		Image:           cfg.Helper.Image,
		ImagePullPolicy: corev1.PullPolicy(cfg.Helper.ImagePullPolicy),
		Command:         []string{contract.HelperBinaryInImage},
		Args:            args,
		// The marker by which a later pass knows the container is ours, whatever its name.
		Env:             []corev1.EnvVar{{Name: contract.EnvInjected, Value: role}},
		VolumeMounts:    []corev1.VolumeMount{{Name: "", MountPath: cfg.Helper.MountPath}},
		Resources:       resources,
		SecurityContext: securityContext(cfg, pod),
		// The API server's defaults, set here so a re-mutation compares equal; the guard's summary
		// goes to this file so `kubectl describe pod` shows it.
		TerminationMessagePath:   corev1.TerminationMessagePathDefault,
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
	}
}

func guardContainer(cfg *config.Config, pod *corev1.PodSecurityContext, volume string, g *guardPlan, policy string, owned bool) corev1.Container {
	args := []string{contract.CmdGuard}
	vds := make([]corev1.VolumeDevice, 0, len(g.devs))
	for _, d := range g.devs {
		args = append(args, contract.FlagDevice, d.path+"="+d.claim)
		vds = append(vds, corev1.VolumeDevice{Name: d.volume, DevicePath: d.path})
	}
	args = append(args, contract.FlagPolicy, policy, contract.FlagOut, g.out,
		contract.FlagFakeSize, strconv.FormatInt(cfg.LocalBlock.FakeDeviceSizeBytes, 10))
	c := helperContainer(cfg, pod, g.name, contract.RoleGuard, args, owned)
	c.VolumeMounts[0].Name = volume
	c.VolumeDevices = vds
	return c
}

func installContainer(cfg *config.Config, pod *corev1.PodSecurityContext, volume, name string, owned bool) corev1.Container {
	c := helperContainer(cfg, pod, name, contract.RoleInstall,
		[]string{contract.CmdInstall, contract.FlagTo, path.Join(cfg.Helper.MountPath, contract.HelperBinDir)}, owned)
	c.VolumeMounts[0].Name = volume
	return c
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
