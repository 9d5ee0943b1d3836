package manifests_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/google/go-cmp/cmp"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/manifests"
)

// The ConfigMap's file must be accepted by the same strict parser the binaries use.
func TestConfigParses(t *testing.T) {
	data, err := manifests.FS.ReadFile("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatalf("manifests/config.yaml does not parse: %v", err)
	}
	if cfg.StateDir == "" || cfg.KubeletDir == "" {
		t.Fatalf("parsed config lacks directories: %+v", cfg)
	}
}

func TestFindMissing(t *testing.T) {
	var ns corev1.Namespace
	err := manifests.Find("namespace.yaml", corev1.SchemeGroupVersion.WithKind("Namespace"), "nope", &ns)
	if !errors.Is(err, manifests.ErrNotFound) {
		t.Fatalf("want ErrNotFound, got %v", err)
	}
}

// The agent's mounts must match the directories of the shipped config, or it would act on paths
// the container cannot see.
func TestAgentMountsMatchConfig(t *testing.T) {
	data, err := manifests.FS.ReadFile("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := manifests.Find("agent.yaml", appsv1.SchemeGroupVersion.WithKind("DaemonSet"), "pvrescue-agent", &ds); err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Errorf("agent must be privileged")
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	want := map[string]corev1.MountPropagationMode{cfg.KubeletDir: corev1.MountPropagationBidirectional, cfg.StateDir: corev1.MountPropagationBidirectional, "/dev": ""}
	for path, prop := range want {
		found := false
		for _, m := range c.VolumeMounts {
			if m.MountPath != path {
				continue
			}
			found = true
			if hostPaths[m.Name] != path {
				t.Errorf("mount %s comes from host path %q, want the same path", path, hostPaths[m.Name])
			}
			got := corev1.MountPropagationMode("")
			if m.MountPropagation != nil {
				got = *m.MountPropagation
			}
			if prop != "" && got != prop {
				t.Errorf("mount %s: propagation %q, want %q", path, got, prop)
			}
		}
		if !found {
			t.Errorf("agent does not mount %s", path)
		}
	}
	// The local disks' path roots outside /dev hold the admins' links (the local static
	// provisioner's discovery directories): the agent must see them to follow a PV's link chain,
	// read-only since it never changes them.
	for _, root := range cfg.LocalBlock.PathRoots {
		if root == "/dev" || strings.HasPrefix(root, "/dev/") {
			continue
		}
		i := slices.IndexFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == root })
		switch {
		case i < 0:
			t.Errorf("agent does not mount the path root %s (localBlock.pathRoots)", root)
		case hostPaths[c.VolumeMounts[i].Name] != root || !c.VolumeMounts[i].ReadOnly:
			t.Errorf("path root %s: mounted from host path %q read-only %v, want the same path read-only", root, hostPaths[c.VolumeMounts[i].Name], c.VolumeMounts[i].ReadOnly)
		}
	}
	var nodeName bool
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Errorf("NODE_NAME must come from the downward API (spec.nodeName)")
	}
	// containermount finds container processes in /proc: without the host's PID namespace it
	// sees none and the flag must say so.
	remount := slices.Contains(c.Args, "--container-remount=true")
	if ds.Spec.Template.Spec.HostPID != remount {
		t.Errorf("hostPID %v with --container-remount=true %v: container remount needs hostPID and hostPID is only for it", ds.Spec.Template.Spec.HostPID, remount)
	}
	if len(ds.Spec.Template.Spec.Tolerations) != 1 || ds.Spec.Template.Spec.Tolerations[0].Operator != corev1.TolerationOpExists || ds.Spec.Template.Spec.Tolerations[0].Key != "" {
		t.Errorf("agent must tolerate every taint, got %+v", ds.Spec.Template.Spec.Tolerations)
	}
}

// The webhook Deployment's hardening, checked field by field: these are easy to lose in an edit.
func TestWebhookDeploymentHardening(t *testing.T) {
	var d appsv1.Deployment
	if err := manifests.Find("webhook.yaml", appsv1.SchemeGroupVersion.WithKind("Deployment"), "pvrescue-webhook", &d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	ps := d.Spec.Template.Spec
	if ps.SecurityContext == nil || ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
		t.Errorf("pod must run as non-root")
	}
	if ps.SecurityContext == nil || ps.SecurityContext.SeccompProfile == nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod must use seccomp RuntimeDefault")
	}
	if ps.Affinity == nil || ps.Affinity.PodAntiAffinity == nil {
		t.Errorf("pod anti-affinity missing")
	}
	c := ps.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("root filesystem must be read-only")
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("allowPrivilegeEscalation must be false")
	}
	if sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("capabilities must drop ALL")
	}
	if c.ReadinessProbe == nil || c.LivenessProbe == nil {
		t.Errorf("probes missing")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources missing")
	}
}

// Until the webhook package's builder exists to compare against, pin the described contract.
func TestWebhookConfigurationContract(t *testing.T) {
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := manifests.Find("mutatingwebhookconfiguration.yaml", admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"), "pvrescue-webhook", &mwc); err != nil {
		t.Fatal(err)
	}
	if len(mwc.Webhooks) != 1 {
		t.Fatalf("want one webhook, got %d", len(mwc.Webhooks))
	}
	w := mwc.Webhooks[0]
	svc := w.ClientConfig.Service
	if svc == nil || svc.Name != "pvrescue-webhook" || svc.Namespace != "pvrescue-system" || svc.Path == nil || *svc.Path != "/mutate-v1-pod" || svc.Port == nil || *svc.Port != 443 {
		t.Errorf("clientConfig.service = %+v", svc)
	}
	if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore {
		t.Errorf("failurePolicy must be Ignore")
	}
	if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
		t.Errorf("sideEffects must be None")
	}
	if w.TimeoutSeconds == nil || *w.TimeoutSeconds != 5 {
		t.Errorf("timeoutSeconds must be 5")
	}
	if w.ReinvocationPolicy == nil || *w.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy {
		t.Errorf("reinvocationPolicy must be IfNeeded")
	}
	if got := mwc.Annotations["cert-manager.io/inject-ca-from"]; got != "pvrescue-system/pvrescue-webhook-tls" {
		t.Errorf("inject-ca-from = %q", got)
	}
	var nsIn, objOut bool
	for _, e := range w.NamespaceSelector.MatchExpressions {
		if e.Key == contract.LabelInject && len(e.Values) == 1 && e.Values[0] == contract.LabelInjectEnabled {
			nsIn = true
		}
	}
	for _, e := range w.ObjectSelector.MatchExpressions {
		if e.Key == contract.LabelInject && len(e.Values) == 1 && e.Values[0] == contract.LabelInjectOptOutVal {
			objOut = true
		}
	}
	if !nsIn || !objOut {
		t.Errorf("selectors must use %s (namespace opt-in %v, pod opt-out %v)", contract.LabelInject, nsIn, objOut)
	}
}

// The agent's ClusterRole grants what the code calls and nothing cluster-wide it does not: PVs,
// PVCs, StorageClasses and CSIDrivers by name only (nodeagent.ClusterView), no Node patch (only
// nodes/status), no Secret list or watch.
func TestAgentRBACIsLeastPrivilege(t *testing.T) {
	var role rbacv1.ClusterRole
	if err := manifests.Find("rbac-agent.yaml", rbacv1.SchemeGroupVersion.WithKind("ClusterRole"), "pvrescue-agent", &role); err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, r := range role.Rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				key := res
				if g != "" {
					key = g + "/" + res
				}
				got[key] = append(got[key], r.Verbs...)
				slices.Sort(got[key])
			}
		}
	}
	want := map[string][]string{
		"persistentvolumes":                {"get", "patch"},
		"persistentvolumeclaims":           {"get"},
		"storage.k8s.io/storageclasses":    {"get"},
		"storage.k8s.io/csidrivers":        {"get"},
		"storage.k8s.io/volumeattachments": {"get"},
		"pods":                             {"list", "watch"},
		"pods/eviction":                    {"create"},
		"secrets":                          {"get"},
		"nodes":                            {"list", "watch"},
		"namespaces":                       {"list", "watch"},
		"nodes/status":                     {"patch"},
		"events":                           {"create", "patch"},
		"events.k8s.io/events":             {"create", "patch"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("agent ClusterRole (-want +got):\n%s", diff)
	}
}

// The admission policies narrowing the agent's writes are shipped, bound with Deny, and match the
// agent's service account as rbac-agent.yaml names it.
func TestAgentAdmissionPoliciesShipped(t *testing.T) {
	kust, err := manifests.FS.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(kust), "- admission-agent.yaml") {
		t.Errorf("kustomization.yaml does not list admission-agent.yaml")
	}
	var sa corev1.ServiceAccount
	if err := manifests.Find("rbac-agent.yaml", corev1.SchemeGroupVersion.WithKind("ServiceAccount"), "pvrescue-agent", &sa); err != nil {
		t.Fatal(err)
	}
	user := "system:serviceaccount:" + sa.Namespace + ":" + sa.Name
	for _, name := range []string{"pvrescue-agent-persistentvolumes", "pvrescue-agent-own-node"} {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
		if err := manifests.Find("admission-agent.yaml", admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"), name, &p); err != nil {
			t.Fatal(err)
		}
		if err := manifests.Find("admission-agent.yaml", admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"), name, &b); err != nil {
			t.Fatal(err)
		}
		if b.Spec.PolicyName != name || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) {
			t.Errorf("binding %s = %+v, want policy %s with [Deny]", name, b.Spec, name)
		}
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("policy %s must fail closed", name)
		}
		if len(p.Spec.MatchConditions) != 1 || !strings.Contains(p.Spec.MatchConditions[0].Expression, "'"+user+"'") {
			t.Errorf("policy %s must match exactly the agent's user %s, got %+v", name, user, p.Spec.MatchConditions)
		}
	}
}
