//go:build integration

package manifests_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/manifests"
)

const (
	agentNS   = "pvrescue-system"
	agentSA   = "pvrescue-agent"
	nodeNameX = "authentication.kubernetes.io/node-name"
)

// TestAgentIdentityIsLimitedToItsRescues installs the shipped agent RBAC and admission policies
// on a real kube-apiserver, takes the agent's real identity (a service-account token bound to
// the agent's pod on node-a, as kubelet mounts it) and checks that what the rescues do is
// allowed and what they do not do is rejected, with a message saying why.
func TestAgentIdentityIsLimitedToItsRescues(t *testing.T) {
	_, cfg := testenv.APIServer(t)
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	installAgentPrivileges(ctx, t, admin)

	for _, n := range []string{"node-a", "node-b"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agentPod, err := admin.CoreV1().Pods(agentNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pvrescue-agent-a"},
		Spec: corev1.PodSpec{NodeName: "node-a", ServiceAccountName: agentSA, AutomountServiceAccountToken: ptr(false),
			Containers: []corev1.Container{{Name: "agent", Image: "pvrescue-agent"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := admin.CoreV1().ServiceAccounts(agentNS).CreateToken(ctx, agentSA, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr(int64(3600)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: agentPod.Name, UID: agentPod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for the agent's pod: %v", err)
	}
	agent, err := kubernetes.NewForConfig(&rest.Config{Host: cfg.Host, BearerToken: tr.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.CAData}})
	if err != nil {
		t.Fatal(err)
	}

	// The policies rely on the node name in the bound token's user info: check it is there.
	ssr, err := agent.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ui := ssr.Status.UserInfo
	if ui.Username != "system:serviceaccount:"+agentNS+":"+agentSA {
		t.Fatalf("agent token user = %q", ui.Username)
	}
	if got := ui.Extra[nodeNameX]; len(got) != 1 || got[0] != "node-a" {
		t.Fatalf("userInfo.extra[%s] = %v, want [node-a] (extra: %v)", nodeNameX, got, ui.Extra)
	}

	// Objects the rescues work on.
	const appNS = "app"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fs := corev1.PersistentVolumeFilesystem
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a", Annotations: map[string]string{"example.com/owner": "team"}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &fs,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "s3.csi.example", VolumeHandle: "bkt/a",
				NodePublishSecretRef: &corev1.SecretReference{Namespace: appNS, Name: "s3-creds"}}}}}
	if _, err := admin.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Secrets(appNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds"},
		StringData: map[string]string{"accessKeyID": "AK"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sc := "s3"
	if _, err := admin.CoreV1().PersistentVolumeClaims(appNS).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &sc, VolumeName: "pv-a",
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: sc}, Provisioner: "s3.csi.example"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: "s3.csi.example"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim, err := admin.CoreV1().Pods(appNS).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "on-fake-disk"},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app", Image: "busybox"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	conditionPatch := func(node string) []byte {
		b, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{{
			Type: "LocalDiskMissing", Status: corev1.ConditionFalse, Reason: "LocalDisksPresent", Message: "ok",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}})
		return b
	}
	annotationPatch := func(kv map[string]any) []byte {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": kv}})
		return b
	}

	// The policies take effect asynchronously once created: wait until the first forbidden
	// write is rejected by them (before that RBAC alone would let it through).
	var lastErr error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, lastErr = agent.CoreV1().Nodes().PatchStatus(ctx, "node-b", conditionPatch("node-b"))
		return lastErr != nil && strings.Contains(lastErr.Error(), "pvrescue-agent"), nil
	}); err != nil {
		t.Fatalf("the own-node policy never rejected a status patch of another node (last answer: %v)", lastErr)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, lastErr = agent.CoreV1().PersistentVolumes().Patch(ctx, "pv-a", types.MergePatchType, annotationPatch(map[string]any{"example.com/x": "1"}), metav1.PatchOptions{})
		return lastErr != nil && strings.Contains(lastErr.Error(), "pvrescue-agent"), nil
	}); err != nil {
		t.Fatalf("the PV policy never rejected a foreign annotation (last answer: %v)", lastErr)
	}

	t.Run("allowed: what the rescues do", func(t *testing.T) {
		for _, c := range []struct {
			what string
			do   func() error
		}{
			{"get PV", func() error {
				_, err := agent.CoreV1().PersistentVolumes().Get(ctx, "pv-a", metav1.GetOptions{})
				return err
			}},
			{"get PVC", func() error {
				_, err := agent.CoreV1().PersistentVolumeClaims(appNS).Get(ctx, "data", metav1.GetOptions{})
				return err
			}},
			{"get StorageClass", func() error {
				_, err := agent.StorageV1().StorageClasses().Get(ctx, sc, metav1.GetOptions{})
				return err
			}},
			{"get CSIDriver", func() error {
				_, err := agent.StorageV1().CSIDrivers().Get(ctx, "s3.csi.example", metav1.GetOptions{})
				return err
			}},
			{"get the Secret a PV names", func() error {
				_, err := agent.CoreV1().Secrets(appNS).Get(ctx, "s3-creds", metav1.GetOptions{})
				return err
			}},
			{"list+watch pods of its node", func() error {
				l, err := agent.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"})
				if err != nil {
					return err
				}
				w, err := agent.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a", ResourceVersion: l.ResourceVersion})
				if err == nil {
					w.Stop()
				}
				return err
			}},
			{"list its node", func() error {
				_, err := agent.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=node-a"})
				return err
			}},
			{"patch its own node's status", func() error {
				_, err := agent.CoreV1().Nodes().PatchStatus(ctx, "node-a", conditionPatch("node-a"))
				return err
			}},
			{"set pvrescue.io/fake-device on a PV", func() error {
				_, err := agent.CoreV1().PersistentVolumes().Patch(ctx, "pv-a", types.MergePatchType,
					annotationPatch(map[string]any{contract.AnnotationFakeDevice: "/dev/loop9"}), metav1.PatchOptions{})
				return err
			}},
			{"remove pvrescue.io/fake-device from a PV", func() error {
				_, err := agent.CoreV1().PersistentVolumes().Patch(ctx, "pv-a", types.MergePatchType,
					annotationPatch(map[string]any{contract.AnnotationFakeDevice: nil}), metav1.PatchOptions{})
				return err
			}},
			{"create an Event", func() error {
				_, err := agent.CoreV1().Events(appNS).Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "pvrescue-"},
					InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: appNS, Name: victim.Name, UID: victim.UID},
					Reason:         "FakeDevice", Message: "test", Type: corev1.EventTypeNormal}, metav1.CreateOptions{})
				return err
			}},
			{"evict a pod", func() error {
				return agent.PolicyV1().Evictions(appNS).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: appNS}})
			}},
		} {
			if err := c.do(); err != nil {
				t.Errorf("%s: %v", c.what, err)
			}
		}
	})

	t.Run("rejected by admission, with a clear message", func(t *testing.T) {
		for _, c := range []struct {
			what, want string
			do         func() error
		}{
			{"another node's status", "pvrescue-agent on node node-a may change only its own Node status, not that of node node-b", func() error {
				_, err := agent.CoreV1().Nodes().PatchStatus(ctx, "node-b", conditionPatch("node-b"))
				return err
			}},
			{"a PV's reclaim policy", "may change only pvrescue.io/ annotations of a PersistentVolume, not its spec", func() error {
				_, err := agent.CoreV1().PersistentVolumes().Patch(ctx, "pv-a", types.MergePatchType,
					[]byte(`{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}`), metav1.PatchOptions{})
				return err
			}},
			{"a PV annotation outside pvrescue.io/", "not example.com/x", func() error {
				_, err := agent.CoreV1().PersistentVolumes().Patch(ctx, "pv-a", types.MergePatchType,
					annotationPatch(map[string]any{"example.com/x": "1"}), metav1.PatchOptions{})
				return err
			}},
			{"removing another component's PV annotation", "not example.com/owner", func() error {
				_, err := agent.CoreV1().PersistentVolumes().Patch(ctx, "pv-a", types.MergePatchType,
					annotationPatch(map[string]any{"example.com/owner": nil}), metav1.PatchOptions{})
				return err
			}},
			{"a PV label", "not its labels, finalizers or owner references", func() error {
				_, err := agent.CoreV1().PersistentVolumes().Patch(ctx, "pv-a", types.MergePatchType,
					[]byte(`{"metadata":{"labels":{"pvrescue.io/x":"1"}}}`), metav1.PatchOptions{})
				return err
			}},
		} {
			err := c.do()
			if err == nil {
				t.Errorf("%s: allowed", c.what)
				continue
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
				t.Errorf("%s: rejected with %v, want an admission denial", c.what, err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: message %q does not say %q", c.what, err.Error(), c.want)
			}
		}
		got, err := admin.CoreV1().PersistentVolumes().Get(ctx, "pv-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimRetain || got.Annotations["example.com/owner"] != "team" || len(got.Labels) != 0 {
			t.Errorf("PV changed by rejected patches: %+v %v %v", got.Spec.PersistentVolumeReclaimPolicy, got.Annotations, got.Labels)
		}
	})

	t.Run("a token without a node name may patch no node status", func(t *testing.T) {
		icfg := rest.CopyConfig(cfg)
		icfg.Impersonate = rest.ImpersonationConfig{UserName: ui.Username, Groups: ui.Groups}
		unbound, err := kubernetes.NewForConfig(icfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = unbound.CoreV1().Nodes().PatchStatus(ctx, "node-a", conditionPatch("node-a"))
		if err == nil || !strings.Contains(err.Error(), "only with a service-account token bound to a pod on that node") {
			t.Errorf("status patch without node name: %v, want the policy's denial", err)
		}
	})

	t.Run("rejected by RBAC: nothing cluster-wide it does not need", func(t *testing.T) {
		for _, c := range []struct {
			what string
			do   func() error
		}{
			{"list PVs", func() error { _, err := agent.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); return err }},
			{"watch PVCs", func() error {
				w, err := agent.CoreV1().PersistentVolumeClaims("").Watch(ctx, metav1.ListOptions{})
				if err == nil {
					w.Stop()
				}
				return err
			}},
			{"list Secrets", func() error { _, err := agent.CoreV1().Secrets(appNS).List(ctx, metav1.ListOptions{}); return err }},
			{"patch a Node (labels)", func() error {
				_, err := agent.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
				return err
			}},
			{"delete a PV", func() error { return agent.CoreV1().PersistentVolumes().Delete(ctx, "pv-a", metav1.DeleteOptions{}) }},
		} {
			if err := c.do(); !apierrors.IsForbidden(err) {
				t.Errorf("%s: %v, want Forbidden", c.what, err)
			}
		}
	})

	t.Run("other clients are not affected", func(t *testing.T) {
		if _, err := admin.CoreV1().PersistentVolumes().Patch(ctx, "pv-a", types.MergePatchType,
			[]byte(`{"spec":{"persistentVolumeReclaimPolicy":"Delete"}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("admin PV spec patch: %v", err)
		}
		if _, err := admin.CoreV1().Nodes().PatchStatus(ctx, "node-b", conditionPatch("node-b")); err != nil {
			t.Errorf("admin node-b status patch: %v", err)
		}
	})
}

// installAgentPrivileges creates the shipped namespace-scoped ServiceAccount, ClusterRole(Binding)
// and admission policies, decoded from the embedded manifests.
func installAgentPrivileges(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var sa corev1.ServiceAccount
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	must(t, manifests.Find("rbac-agent.yaml", corev1.SchemeGroupVersion.WithKind("ServiceAccount"), agentSA, &sa))
	must(t, manifests.Find("rbac-agent.yaml", rbacv1.SchemeGroupVersion.WithKind("ClusterRole"), agentSA, &role))
	must(t, manifests.Find("rbac-agent.yaml", rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"), agentSA, &binding))
	_, err := cs.CoreV1().ServiceAccounts(agentNS).Create(ctx, &sa, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &binding, metav1.CreateOptions{})
	must(t, err)
	for _, name := range []string{"pvrescue-agent-persistentvolumes", "pvrescue-agent-own-node"} {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
		must(t, manifests.Find("admission-agent.yaml", admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicy"), name, &p))
		must(t, manifests.Find("admission-agent.yaml", admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingAdmissionPolicyBinding"), name, &b))
		// (Type-check warnings are written to the policy's status by kube-controller-manager, which
		// envtest does not run; the test below proves each expression by its answers instead.)
		_, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &p, metav1.CreateOptions{})
		must(t, err)
		_, err = cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &b, metav1.CreateOptions{})
		must(t, err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ptr[T any](v T) *T { return &v }
