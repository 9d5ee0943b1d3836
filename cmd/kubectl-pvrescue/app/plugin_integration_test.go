//go:build integration

package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/cmd/kubectl-pvrescue/app"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/manifests"
	"github.com/pvrescue/pvrescue/webhook"
)

// The plugin against a real kube-apiserver: the objects pvrescue's components write are seeded
// through the API (PV annotation, Node condition via the status subresource, Events, the webhook's
// pod annotation, the webhook configuration of manifests/) and the command is run as kubectl
// would, with --kubeconfig.
func TestPluginAgainstAPIServer(t *testing.T) {
	_, cfg := testenv.APIServer(t)
	ctx := context.Background()
	c := kubernetes.NewForConfigOrDie(cfg)
	kubeconfig := writeKubeconfig(t, cfg)
	now := time.Now().Truncate(time.Second)
	seed(t, ctx, c, now)

	run := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		o := app.NewOptions(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
		o.Clock = clocktesting.NewFakePassiveClock(now.Add(10 * time.Minute))
		cmd := app.NewCommand(o)
		cmd.SetArgs(append([]string{"--kubeconfig", kubeconfig}, args...))
		if err := cmd.ExecuteContext(ctx); err != nil {
			t.Fatalf("kubectl pvrescue %s: %v\n%s", strings.Join(args, " "), err, errOut.String())
		}
		return out.String()
	}

	t.Run("status json", func(t *testing.T) {
		var r app.StatusReport
		if err := json.Unmarshal([]byte(run("status", "-o", "json")), &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Nodes) != 2 || r.Nodes[0].Name != "node-a" || r.Nodes[1].Name != "node-b" {
			t.Fatalf("nodes = %+v", r.Nodes)
		}
		type row struct{ Kind, PV, Pod, Path, Device string }
		var got []row
		for _, it := range r.Nodes[0].Items {
			got = append(got, row{it.Kind, it.PV, it.Pod, it.Path, it.Device})
			if it.Since == nil {
				t.Errorf("%s %s has no since", it.Kind, it.PV)
			}
		}
		want := []row{
			{app.RowDiskMissing, "pv-data1", "", "/dev/disk/by-id/wwn-data1", ""},
			{app.RowDiskMissing, "pv-data2", "", "/dev/disk/by-id/wwn-data2", ""},
			{app.RowFakeDevice, "pv-data1", "", "/dev/disk/by-id/wwn-data1", "/dev/loop101"},
			{app.RowMountBridged, "pv-s3", "app/reader-0", "", ""},
			{app.RowMountFailed, "pv-s3", "app/reader-0", "", ""},
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("node-a items (-want +got):\n%s", d)
		}
		for _, it := range r.Nodes[0].Items {
			if it.Kind == app.RowFakeDevice && !it.Since.Equal(now.Add(-5*time.Minute)) {
				t.Errorf("fake since %v, want the FakeDeviceCreated Event's time %v", it.Since, now.Add(-5*time.Minute))
			}
		}
		if len(r.Nodes[1].Items) != 0 {
			t.Errorf("node-b should be quiet: %+v", r.Nodes[1].Items)
		}
		var unprotected []string
		for _, p := range r.Unprotected {
			unprotected = append(unprotected, p.Namespace+"/"+p.Name+" "+strings.Join(p.Volumes, ","))
		}
		if d := cmp.Diff([]string{"app/unprotected-0 data (local-block)", "app/unprotected-s3 bucket (s3)"}, unprotected); d != "" {
			t.Errorf("unprotected pods (-want +got):\n%s", d)
		}
		if len(r.Notes) != 0 {
			t.Errorf("notes: %v (config and webhook configuration should have been read)", r.Notes)
		}
	})

	t.Run("status table", func(t *testing.T) {
		out := run("status")
		t.Logf("kubectl pvrescue status:\n%s", out)
		for _, want := range []string{
			"NODE", "node-a  fake-device           pv-data1  <none>        /dev/disk/by-id/wwn-data1  15m", "node-b  ok",
			"Unprotected pods (2)", "app        unprotected-0",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("status table lacks %q:\n%s", want, out)
			}
		}
		wide := run("status", "-o", "wide")
		if !strings.Contains(wide, "/dev/loop101") || !strings.Contains(wide, "DEVICE") {
			t.Errorf("-o wide lacks the device column:\n%s", wide)
		}
	})

	t.Run("status yaml", func(t *testing.T) {
		if out := run("status", "-o", "yaml"); !strings.Contains(out, "unprotectedPods:") || !strings.Contains(out, "kind: fake-device") {
			t.Errorf("yaml output:\n%s", out)
		}
	})

	t.Run("explain mutated pod", func(t *testing.T) {
		var e app.Explanation
		if err := json.Unmarshal([]byte(run("explain", "pod", "reader-0", "-n", "app", "-o", "json")), &e); err != nil {
			t.Fatal(err)
		}
		if !e.Mutated || e.Webhook == nil || len(e.Webhook.Containers) != 1 || e.Webhook.Containers[0].Injected[0] != "probe" {
			t.Errorf("webhook status not decoded: %+v", e)
		}
		if len(e.Volumes) != 1 || e.Volumes[0].Kind != "s3" || e.Volumes[0].PV != "pv-s3" {
			t.Errorf("volumes = %+v", e.Volumes)
		}
		var reasons []string
		for _, ev := range e.Events {
			reasons = append(reasons, ev.Reason)
		}
		if d := cmp.Diff([]string{"MountRestoreFailed", "MountBridged"}, reasons); d != "" {
			t.Errorf("events (-want +got):\n%s", d)
		}
		table := run("explain", "pod", "reader-0", "-n", "app")
		t.Logf("kubectl pvrescue explain pod reader-0 -n app:\n%s", table)
		for _, want := range []string{"Webhook: mutated", "container app: probe, propagation", "MountBridged", "pv-s3"} {
			if !strings.Contains(table, want) {
				t.Errorf("explain table lacks %q:\n%s", want, table)
			}
		}
	})

	t.Run("explain unprotected pod", func(t *testing.T) {
		var e app.Explanation
		if err := json.Unmarshal([]byte(run("explain", "pod", "unprotected-0", "-n", "app", "-o", "json")), &e); err != nil {
			t.Fatal(err)
		}
		if e.Mutated || !strings.Contains(e.Reason, "admitted without the webhook") {
			t.Errorf("reason = %q", e.Reason)
		}
		if len(e.Volumes) != 1 || e.Volumes[0].FakeDevice != "/dev/loop101" {
			t.Errorf("volume should show the fake device: %+v", e.Volumes)
		}
		var reasons []string
		for _, ev := range e.Events {
			reasons = append(reasons, ev.Object+" "+ev.Reason)
		}
		if d := cmp.Diff([]string{"persistentvolume/pv-data1 FakeDeviceCreated"}, reasons); d != "" {
			t.Errorf("events (-want +got):\n%s", d)
		}
	})

	t.Run("explain pod in a namespace not opted in", func(t *testing.T) {
		var e app.Explanation
		if err := json.Unmarshal([]byte(run("explain", "pod", "plain", "-n", "other", "-o", "json")), &e); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(e.Reason, "namespace other is not opted in") {
			t.Errorf("reason = %q", e.Reason)
		}
	})

	t.Run("errors", func(t *testing.T) {
		o := app.NewOptions(genericiooptions.NewTestIOStreamsDiscard())
		cmd := app.NewCommand(o)
		cmd.SetArgs([]string{"--kubeconfig", kubeconfig, "explain", "pod", "nope", "-n", "app"})
		if err := cmd.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "pod not found: app/nope") {
			t.Errorf("missing pod: %v", err)
		}
	})
}

func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin", Namespace: "default"}
	kc.CurrentContext = "envtest"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, p); err != nil {
		t.Fatal(err)
	}
	return p
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// seed writes what a cluster with pvrescue holds: node-a with a missing disk and a fake, an S3 pod
// whose mount was restored, two pods admitted without the webhook, and pvrescue's own objects.
func seed(t *testing.T, ctx context.Context, c kubernetes.Interface, now time.Time) {
	t.Helper()
	block := corev1.PersistentVolumeBlock
	local := "local-ssd"
	s3class := "s3"

	for _, ns := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "pvrescue-system"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: map[string]string{contract.LabelInject: contract.LabelInjectEnabled}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
	} {
		must[*corev1.Namespace](t)(c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}))
		// No controller-manager here to make it.
		must[*corev1.ServiceAccount](t)(c.CoreV1().ServiceAccounts(ns.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}))
	}
	cfgYAML, err := manifests.FS.ReadFile("config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// kustomize's name, with its hash suffix.
	must[*corev1.ConfigMap](t)(c.CoreV1().ConfigMaps("pvrescue-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "pvrescue-config-7c9h2mk5b8"}, Data: map[string]string{"config.yaml": string(cfgYAML)}}, metav1.CreateOptions{}))
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := manifests.Find("mutatingwebhookconfiguration.yaml", admissionregistrationv1.SchemeGroupVersion.WithKind("MutatingWebhookConfiguration"), "pvrescue-webhook", &mwc); err != nil {
		t.Fatal(err)
	}
	// No service behind it: the apiserver fails open (Ignore) while the test creates pods, which
	// is exactly how unprotected pods come to be.
	must[*admissionregistrationv1.MutatingWebhookConfiguration](t)(c.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &mwc, metav1.CreateOptions{}))

	for _, name := range []string{"node-a", "node-b"} {
		must[*corev1.Node](t)(c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}))
	}
	node := must[*corev1.Node](t)(c.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{}))
	node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
		Type: "LocalDiskMissing", Status: corev1.ConditionTrue, Reason: "LocalDiskMissing",
		Message: "local disks missing for PVs: pv-data1, pv-data2", LastTransitionTime: metav1.NewTime(now.Add(-6 * time.Minute)),
		LastHeartbeatTime: metav1.NewTime(now)})
	must[*corev1.Node](t)(c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}))

	must[*storagev1.StorageClass](t)(c.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: s3class}, Provisioner: "ru.yandex.s3.csi"}, metav1.CreateOptions{}))

	pv := func(name, claim string, annotations map[string]string, src corev1.PersistentVolumeSource, class string, mode *corev1.PersistentVolumeMode) {
		p := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeSource: src, StorageClassName: class, VolumeMode: mode,
				ClaimRef: &corev1.ObjectReference{Namespace: "app", Name: claim},
			},
		}
		if src.Local != nil {
			p.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}}}}}}}
		}
		must[*corev1.PersistentVolume](t)(c.CoreV1().PersistentVolumes().Create(ctx, p, metav1.CreateOptions{}))
	}
	pv("pv-data1", "data1", map[string]string{contract.AnnotationFakeDevice: "/dev/loop101"},
		corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/dev/disk/by-id/wwn-data1"}}, local, &block)
	pv("pv-data2", "data2", nil, corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/dev/disk/by-id/wwn-data2"}}, local, &block)
	pv("pv-s3", "bucket", nil, corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ru.yandex.s3.csi", VolumeHandle: "bucket/x"}}, s3class, nil)

	pvc := func(name, class string, mode *corev1.PersistentVolumeMode) {
		must[*corev1.PersistentVolumeClaim](t)(c.CoreV1().PersistentVolumeClaims("app").Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, VolumeMode: mode,
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}},
		}, metav1.CreateOptions{}))
	}
	pvc("data1", local, &block)
	pvc("bucket", s3class, nil)

	pod := func(ns, name, node, claim string, annotations, labels map[string]string) {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations, Labels: labels},
			Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		}
		if claim != "" {
			vol := "data"
			if claim == "bucket" {
				vol = "bucket"
			}
			p.Spec.Volumes = []corev1.Volume{{Name: vol, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		}
		must[*corev1.Pod](t)(c.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}))
	}
	// What the webhook writes: its own Injection type as JSON, so the seed cannot drift from it.
	status, err := json.Marshal(webhook.Injection{Install: contract.InstallContainerName,
		Containers: []webhook.ContainerStatus{{Name: "app", Injected: []string{"probe", "propagation"}}}})
	if err != nil {
		t.Fatal(err)
	}
	pod("app", "reader-0", "node-a", "bucket", map[string]string{contract.AnnotationStatus: string(status)}, nil)
	pod("app", "unprotected-0", "node-a", "data1", nil, nil)
	pod("app", "unprotected-s3", "node-b", "bucket", nil, nil)
	pod("app", "opted-out", "node-b", "bucket", nil, map[string]string{contract.LabelInject: "false"})
	pod("app", "no-volumes", "node-b", "", nil, nil)
	pod("other", "plain", "node-b", "data1", nil, nil)

	event := func(ns, name string, obj corev1.ObjectReference, typ, reason, msg string, at time.Time) {
		must[*corev1.Event](t)(c.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name}, InvolvedObject: obj, Type: typ, Reason: reason, Message: msg,
			FirstTimestamp: metav1.NewTime(at), LastTimestamp: metav1.NewTime(at), Count: 1,
			Source: corev1.EventSource{Component: component(reason), Host: "node-a"},
		}, metav1.CreateOptions{}))
	}
	pvRef := corev1.ObjectReference{Kind: "PersistentVolume", Name: "pv-data1", APIVersion: "v1"}
	podRef := corev1.ObjectReference{Kind: "Pod", Namespace: "app", Name: "reader-0", APIVersion: "v1"}
	event("default", "pv-data1.1", pvRef, corev1.EventTypeNormal, "FakeDeviceCreated",
		"local disk /dev/disk/by-id/wwn-data1 is missing on node node-a; a 512-byte fake device /dev/loop101 stands in so pods can start", now.Add(-5*time.Minute))
	event("app", "reader-0.1", podRef, corev1.EventTypeWarning, "MountRestoreFailed", "endpoint: restoring S3 volume pv-s3: dial tcp 127.0.0.1:7070: connection refused", now.Add(-3*time.Minute))
	event("app", "reader-0.2", podRef, corev1.EventTypeNormal, "MountBridged", "S3 volume pv-s3 mounted again (fresh s3fs bound over the dead mount)", now.Add(-2*time.Minute))
	// Unrelated noise.
	event("app", "reader-0.3", podRef, corev1.EventTypeNormal, "Pulled", "image pulled", now.Add(-time.Minute))
}

func component(reason string) string {
	if reason == "Pulled" {
		return "kubelet"
	}
	return "pvrescue-agent"
}
