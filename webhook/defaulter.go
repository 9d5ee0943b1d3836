package webhook

import (
	"context"
	"slices"

	jsonpatch "gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// SystemNamespaces are never mutated, whatever the selectors say.
var SystemNamespaces = []string{"kube-system", "kube-public", "kube-node-lease"}

// Result and reason label values of the admissions metric (a small fixed set).
const (
	ResultInjected = "injected"
	ResultSkipped  = "skipped"
	ResultError    = "error"

	ReasonInjected          = "injected"
	ReasonExcludedNamespace = "excluded-namespace"
	ReasonOptedOut          = "opted-out"
	ReasonNoCandidates      = "no-candidate-volumes"
	ReasonNothingToInject   = "nothing-to-inject"
	ReasonNotCreate         = "not-create"
	ReasonBadRequest        = "bad-request"
	ReasonInternal          = "internal"
)

// Injection is what one admission came to — the one result type of this package. Inject fills
// it for a pod, the Defaulter adds the admission's Result and Reason, the handler answers with its
// Patch and Warnings. Its recorded part (the fields with JSON names) is the value of annotation
// pvrescue.io/status: the pod's final state, not the last call's actions, so that mutating the
// output again reproduces it exactly.
type Injection struct {
	// Result and Reason label the admissions metric.
	Result string `json:"-"`
	Reason string `json:"-"`
	// Warnings are returned to the client (kubectl prints them).
	Warnings []string `json:"-"`
	// Patch holds the JSON patch operations Inject performed on the pod, in order.
	Patch []jsonpatch.JsonPatchOperation `json:"-"`

	// Volume is the name of the shared emptyDir pvrescue added (contract.VolumeName unless taken).
	Volume string `json:"volume,omitempty"`
	// Guards are the guard init containers; empty when the pod maps no local block volume.
	Guards []Guard `json:"guards,omitempty"`
	// FakeDevicePolicy is the policy handed to the guards.
	FakeDevicePolicy string `json:"fakeDevicePolicy,omitempty"`
	// Install names the init container that copies the helper into the shared volume.
	Install string `json:"install,omitempty"`
	// Containers lists, per user container, what it carries.
	Containers []ContainerStatus `json:"containers,omitempty"`
	// Skipped records what was not done and why: volumes that could not be classified and
	// pieces left out of a container. Each has a warning too.
	Skipped []Skip `json:"skipped,omitempty"`
}

// Injected reports whether the pod carries anything from pvrescue.
func (in *Injection) Injected() bool {
	return len(in.Guards) > 0 || in.Install != "" || len(in.Containers) > 0
}

// Guard is one guard init container and the devices it checks.
type Guard struct {
	Container string `json:"container"`
	// Devices are PATH=CLAIM, as passed to the guard.
	Devices []string `json:"devices"`
	// Out and For are set when the pod needs one guard per container (its containers map the
	// same claim at different paths, or different claims at one path): the guard's report
	// directory and the containers it serves. A single guard writes to the shared volume's root.
	Out string   `json:"out,omitempty"`
	For []string `json:"for,omitempty"`
}

// ContainerStatus is what one user container carries.
type ContainerStatus struct {
	Name     string   `json:"name"`
	Init     bool     `json:"init,omitempty"`
	Injected []string `json:"injected"`
}

// Skip is something pvrescue left out, and why.
type Skip struct {
	// Volume is set for a volume that could not be classified.
	Volume string `json:"volume,omitempty"`
	// Container and What (one of the Injected* words, or "guard") name a piece left out of a container.
	Container string `json:"container,omitempty"`
	What      string `json:"what,omitempty"`
	Reason    string `json:"reason"`
}

// Defaulter decides the mutation of one pod: namespace and opt-out checks, classification of
// its volumes, then Inject.
type Defaulter struct {
	Config     *config.Config
	Classifier *Classifier
	// Namespace is the webhook's own namespace; never mutated.
	Namespace string
}

// Default mutates pod (created in namespace ns) in place and returns what it did, with the JSON
// patch that does the same to the request's object.
func (d *Defaulter) Default(ctx context.Context, ns string, pod *corev1.Pod) Injection {
	return d.run(ctx, ns, pod, Inject)
}

// Decide is Default with pod left as it was (Decide, not Inject): what an admission needs.
func (d *Defaulter) Decide(ctx context.Context, ns string, pod *corev1.Pod) Injection {
	return d.run(ctx, ns, pod, Decide)
}

func (d *Defaulter) run(ctx context.Context, ns string, pod *corev1.Pod,
	inject func(*corev1.Pod, Classification, *config.Config) Injection) Injection {
	if ns == d.Namespace || slices.Contains(SystemNamespaces, ns) {
		return Injection{Result: ResultSkipped, Reason: ReasonExcludedNamespace}
	}
	if pod.Labels[contract.LabelInject] == contract.LabelInjectOptOutVal {
		return Injection{Result: ResultSkipped, Reason: ReasonOptedOut}
	}
	if !HasCandidateVolumes(pod) {
		return Injection{Result: ResultSkipped, Reason: ReasonNoCandidates}
	}
	in := inject(pod, d.Classifier.Classify(ctx, ns, pod), d.Config)
	if !in.Injected() {
		in.Result, in.Reason = ResultSkipped, ReasonNothingToInject
	} else {
		in.Result, in.Reason = ResultInjected, ReasonInjected
	}
	return in
}

// HasCandidateVolumes is the Go twin of the configuration's CEL matchCondition.
func HasCandidateVolumes(pod *corev1.Pod) bool {
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil {
			return true
		}
	}
	return false
}
