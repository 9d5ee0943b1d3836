package localdisk

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/podclaim"
)

// Guarded reports whether pod carries the guard the webhook injects for its volume named volume
// (a pod volume, whose claim is the local block PV's): an init container marked as ours with the
// guard role, running the helper's guard command, that maps that volume in its volumeDevices and
// names the device and the claim in its arguments. Only that guard filters a fake device out of what the
// application sees, so only it makes a fake safe for the pod.
//
// The status annotation is never evidence: anyone creating a pod can write it (copied from a
// mutated pod's YAML, in a namespace the webhook never saw), and the webhook writes it even when
// it skipped the pod.
//
// A generic ephemeral volume's guard names its claim <pod>-<volume>, or the volume alone when the
// pod was admitted without a name yet (generateName): both are accepted.
func Guarded(pod *corev1.Pod, volume string) bool {
	var claims []string
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.Name != volume {
			continue
		}
		if claim, ok := podclaim.Name(pod, v); ok {
			claims = append(claims, claim)
			if v.Ephemeral != nil {
				claims = append(claims, v.Name)
			}
		}
	}
	for i := range pod.Spec.InitContainers {
		for _, claim := range claims {
			if guards(&pod.Spec.InitContainers[i], volume, claim) {
				return true
			}
		}
	}
	return false
}

func guards(c *corev1.Container, volume, claim string) bool {
	marked := slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == contract.EnvInjected && e.Value == contract.RoleGuard && e.ValueFrom == nil
	})
	if !marked || !slices.Equal(c.Command, []string{contract.HelperBinaryInImage}) ||
		len(c.Args) == 0 || c.Args[0] != contract.CmdGuard {
		return false
	}
	for _, vd := range c.VolumeDevices {
		if vd.Name == volume && guardsDevice(c.Args[1:], vd.DevicePath, claim) {
			return true
		}
	}
	return false
}

// guardsDevice reports whether the guard's arguments check the claim's device at path
// ("--device path=claim", as the webhook writes them).
func guardsDevice(args []string, path, claim string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == contract.FlagDevice {
			if p, c, ok := strings.Cut(args[i+1], "="); ok && p == path && c == claim {
				return true
			}
		}
	}
	return false
}
