package localdisk_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/contract"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
)

func TestGuarded(t *testing.T) {
	with := func(mod func(p *corev1.Pod)) *corev1.Pod {
		p := podOn("p", guard, time.Now())
		mod(p)
		return p
	}
	for _, tc := range []struct {
		name   string
		pod    *corev1.Pod
		volume string
		want   bool
	}{
		{"the webhook's guard for the volume", podOn("p", guard, time.Now()), "d", true},
		{"the guard with other containers around it", with(func(p *corev1.Pod) {
			p.Spec.InitContainers = append([]corev1.Container{{Name: "user-init"}}, p.Spec.InitContainers...)
		}), "d", true},
		{"a copied status annotation alone", bareOn("p", guard, time.Now()), "d", false},
		{"no annotation, no guard", bareOn("p", nil, time.Now()), "d", false},
		// The annotation is informational only: the guard container decides.
		{"the guard without the annotation", with(func(p *corev1.Pod) { p.Annotations = nil }), "d", true},
		{"another volume of the pod", podOn("p", guard, time.Now()), "other", false},
		{"guard for another volume", with(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].VolumeDevices[0].Name = "e"
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "e", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}})
		}), "d", false},
		{"volume that is not a claim", with(func(p *corev1.Pod) {
			p.Spec.Volumes[0].PersistentVolumeClaim = nil
		}), "d", false},
		{"no marker", with(func(p *corev1.Pod) { p.Spec.InitContainers[0].Env = nil }), "d", false},
		{"marker with the install role", with(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].Env[0].Value = contract.RoleInstall
		}), "d", false},
		{"marker from a reference, not a value", with(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].Env[0].ValueFrom = &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}
		}), "d", false},
		{"the guard as an app container", with(func(p *corev1.Pod) {
			p.Spec.Containers, p.Spec.InitContainers = p.Spec.InitContainers, nil
		}), "d", false},
		{"another command", with(func(p *corev1.Pod) { p.Spec.InitContainers[0].Command = []string{"/bin/true"} }), "d", false},
		{"not the guard subcommand", with(func(p *corev1.Pod) { p.Spec.InitContainers[0].Args[0] = contract.CmdInstall }), "d", false},
		{"no arguments", with(func(p *corev1.Pod) { p.Spec.InitContainers[0].Args = nil }), "d", false},
		{"the device not in volumeDevices", with(func(p *corev1.Pod) { p.Spec.InitContainers[0].VolumeDevices = nil }), "d", false},
		{"the guard checks another path", with(func(p *corev1.Pod) { p.Spec.InitContainers[0].Args[2] = "/dev/other=data" }), "d", false},
		{"the guard checks another claim", with(func(p *corev1.Pod) { p.Spec.InitContainers[0].Args[2] = "/dev/data=other" }), "d", false},
		{"--device without a value", with(func(p *corev1.Pod) { p.Spec.InitContainers[0].Args = []string{contract.CmdGuard, contract.FlagDevice} }), "d", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := localdisk.Guarded(tc.pod, tc.volume); got != tc.want {
				t.Errorf("Guarded(%s) = %v, want %v", tc.volume, got, tc.want)
			}
		})
	}
}
