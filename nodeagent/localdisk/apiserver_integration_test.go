//go:build integration

package localdisk_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kuberecord "k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk/localdisktest"
)

// apiWorld is a real kube-apiserver holding node n1 (fake devices enabled), namespace app and
// the bound pair boundPV/boundPVC, with a controller on a fake host; tests add their pods.
type apiWorld struct {
	ctx      context.Context
	cancel   context.CancelFunc
	client   kubernetes.Interface
	view     *nodeagent.KubeView
	fos      *localdisktest.FakeOS
	recorder *kuberecord.FakeRecorder
	c        *localdisk.Controller
}

// newAPIWorld starts the apiserver and seeds it; adjust (may be nil) changes the client's config.
func newAPIWorld(t *testing.T, adjust func(*rest.Config)) *apiWorld {
	t.Helper()
	_, rc := testenv.APIServer(t)
	if adjust != nil {
		rc = rest.CopyConfig(rc)
		adjust(rc)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	t.Cleanup(cancel) // once more, for a test that never starts the view
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	_, err = client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
		"kubernetes.io/hostname": "n1", contract.LabelFakeDevicesDefault: contract.LabelFakeDevicesEnabled}}}, metav1.CreateOptions{})
	must("node", err)
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{})
	must("namespace", err)
	// Bound both ways as the PV binder leaves them (envtest runs no controllers): the claim's
	// status Bound, the PV's claimRef naming the claim's uid the apiserver gave it.
	pv := boundPV()
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pv.Status = corev1.PersistentVolumeStatus{}
	pvc := boundPVC()
	pvc.UID, pvc.Status = "", corev1.PersistentVolumeClaimStatus{}
	pvc.Spec.AccessModes = pv.Spec.AccessModes
	pvc.Spec.Resources = corev1.VolumeResourceRequirements{Requests: pv.Spec.Capacity}
	createdPVC, err := client.CoreV1().PersistentVolumeClaims("app").Create(ctx, pvc, metav1.CreateOptions{})
	must("pvc", err)
	createdPVC.Status.Phase = corev1.ClaimBound
	createdPVC, err = client.CoreV1().PersistentVolumeClaims("app").UpdateStatus(ctx, createdPVC, metav1.UpdateOptions{})
	must("pvc status", err)
	pv.Spec.ClaimRef.UID = createdPVC.UID
	created, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	must("pv", err)
	created.Status.Phase = corev1.VolumeBound
	_, err = client.CoreV1().PersistentVolumes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	must("pv status", err)
	return &apiWorld{ctx: ctx, cancel: cancel, client: client}
}

// start runs the view and makes the controller (passes are the test's: c.SyncOnce).
func (w *apiWorld) start(t *testing.T, clk clock.WithTicker, viewOpts nodeagent.ViewOptions) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.StateDir = testState
	w.fos = localdisktest.NewFakeOS(testState, "/dev")
	view, err := nodeagent.NewKubeView(w.client, "n1", clk, viewOpts)
	if err != nil {
		t.Fatal(err)
	}
	// The informers stop with ctx; Shutdown waits for them, so ctx ends first.
	t.Cleanup(func() {
		w.cancel()
		view.Shutdown()
	})
	if err := view.Start(w.ctx); err != nil {
		t.Fatal(err)
	}
	w.view = view
	w.recorder = kuberecord.NewFakeRecorder(100)
	w.c, err = localdisk.New(nodeagent.Deps{NodeName: "n1", Config: cfg, Client: w.client, View: view, Recorder: w.recorder,
		Registerer: prometheus.NewRegistry(), Clock: clk}, w.fos, localdisk.Options{LoopSearchLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// waitView waits until the view's pods satisfy ok.
func (w *apiWorld) waitView(t *testing.T, what string, ok func([]*corev1.Pod) bool) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, what, testenv.Until(func() bool {
		pods, _ := w.view.Pods().List(labels.Everything())
		return ok(pods)
	}))
}
