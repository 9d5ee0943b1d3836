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
	kuberecord "k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
	"github.com/pvrescue/pvrescue/nodeagent/localdisk/localdisktest"
)

// A deleted PV's fake is retired on the next pass (one resync period), although the view keeps
// bound PVs for its 10-minute TTL: a PV no pod here uses is read live on every pass.
func TestDeletedPVFakeRetiredWithinOneResync(t *testing.T) {
	_, rc := testenv.APIServer(t)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	defer cancel()
	clock := clocktesting.NewFakeClock(time.Now().Truncate(time.Second))
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	_, err = client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
		"kubernetes.io/hostname": "n1", contract.LabelFakeDevicesDefault: contract.LabelFakeDevicesEnabled}}}, metav1.CreateOptions{})
	must("node", err)
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{})
	must("namespace", err)
	pv := boundPV()
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pv.Status = corev1.PersistentVolumeStatus{}
	created, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	must("pv", err)
	created.Status.Phase = corev1.VolumeBound
	_, err = client.CoreV1().PersistentVolumes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	must("pv status", err)
	pvc := boundPVC()
	pvc.Spec.AccessModes = pv.Spec.AccessModes
	pvc.Spec.Resources = corev1.VolumeResourceRequirements{Requests: pv.Spec.Capacity}
	_, err = client.CoreV1().PersistentVolumeClaims("app").Create(ctx, pvc, metav1.CreateOptions{})
	must("pvc", err)
	pod := podOn("db-0", guard, time.Time{})
	pod.UID, pod.Status = "", corev1.PodStatus{}
	pod.Spec.Containers = []corev1.Container{{Name: "db", Image: "db"}}
	_, err = client.CoreV1().Pods("app").Create(ctx, pod, metav1.CreateOptions{})
	must("pod", err)

	cfg := config.Default()
	cfg.StateDir = testState
	fos := localdisktest.NewFakeOS(testState, "/dev")
	view, err := nodeagent.NewKubeView(client, "n1", clock, nodeagent.ViewOptions{}) // shipped TTLs
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Shutdown)
	must("view", view.Start(ctx))
	c, err := localdisk.New(nodeagent.Deps{NodeName: "n1", Config: cfg, Client: client, View: view, Recorder: kuberecord.NewFakeRecorder(100),
		Registerer: prometheus.NewRegistry(), Clock: clock}, fos, localdisk.Options{LoopSearchLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the view to see the pod", testenv.Until(func() bool {
		pods, _ := view.Pods().List(labels.Everything())
		return len(pods) == 1
	}))
	resync := cfg.LocalBlock.ResyncPeriod.Duration
	pass := func() {
		clock.Step(resync)
		c.SyncOnce(ctx)
	}
	pass()
	if fos.Links[testDisk] == "" {
		t.Fatalf("no fake at %s for the missing disk", testDisk)
	}

	// The pod goes, then its claim and PV (as a StatefulSet scale-down with a Delete policy does).
	must("delete pod", client.CoreV1().Pods("app").Delete(ctx, "db-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	testenv.WaitFor(t, 10*time.Second, "the view to see the pod gone", testenv.Until(func() bool {
		pods, _ := view.Pods().List(labels.Everything())
		return len(pods) == 0
	}))
	pass()
	if fos.Links[testDisk] == "" {
		t.Fatal("the fake went when only the pod did (the PV still exists)")
	}
	must("delete pvc", client.CoreV1().PersistentVolumeClaims("app").Delete(ctx, "data", metav1.DeleteOptions{}))
	must("delete pv", client.CoreV1().PersistentVolumes().Delete(ctx, "pv1", metav1.DeleteOptions{}))
	testenv.WaitFor(t, 10*time.Second, "the PV gone from the apiserver (finalizers)", func() error {
		p, err := client.CoreV1().PersistentVolumes().Get(ctx, "pv1", metav1.GetOptions{})
		if err == nil && len(p.Finalizers) > 0 {
			p.Finalizers = nil // no pv-protection controller in envtest
			_, err = client.CoreV1().PersistentVolumes().Update(ctx, p, metav1.UpdateOptions{})
		}
		if err == nil {
			return context.DeadlineExceeded
		}
		return nil
	})
	pass() // one resync period after the deletion, with the view's 10-minute TTL not expired
	fos.Locked(func() {
		if l := fos.Links[testDisk]; l != "" {
			t.Fatalf("the deleted PV's fake is still linked at %s → %s one resync (%s) later", testDisk, l, resync)
		}
		for _, lp := range fos.Loops {
			if lp != nil && lp.BackingFile != "" {
				t.Fatalf("the deleted PV's fake loop device is still attached: %+v", lp)
			}
		}
	})
}
