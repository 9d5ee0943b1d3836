//go:build integration

package localdisk

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kuberecord "k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
)

// evictionLog records the status code of every eviction the apiserver answered.
type evictionLog struct {
	mu    sync.Mutex
	codes []int
}

func (l *evictionLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if err == nil && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/eviction") {
			l.mu.Lock()
			l.codes = append(l.codes, resp.StatusCode)
			l.mu.Unlock()
		}
		return resp, err
	})
}

func (l *evictionLog) get() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.codes...)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// When the real disk returns, the agent evicts the pod through the Eviction API, so a
// PodDisruptionBudget applies: while the budget allows no disruption the apiserver answers 429
// and the agent retries on later passes; once the budget allows one, the eviction goes through.
// A real kube-apiserver decides (its eviction subresource reads the PDB's status); the test
// writes that status as the disruption controller would, since envtest runs no controllers.
func TestEvictionOnReturnRespectsPDB(t *testing.T) {
	_, rc := testenv.APIServer(t)
	evictions := &evictionLog{}
	rc = rest.CopyConfig(rc)
	rc.WrapTransport = evictions.wrap
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(t)))
	defer cancel()

	// The fake is made at fakeAt (the agent's clock); the pod starts after it, so it runs on the fake.
	fakeAt := time.Now().Add(-time.Hour).Truncate(time.Second)
	clock := clocktesting.NewFakeClock(fakeAt)
	mustCreate := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s: %v", what, err)
		}
	}
	_, err = client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
		"kubernetes.io/hostname": "n1", contract.LabelFakeDevicesDefault: contract.LabelFakeDevicesEnabled}}}, metav1.CreateOptions{})
	mustCreate("node", err)
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{})
	mustCreate("namespace", err)
	pv := boundPV()
	pv.Spec.Capacity = corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
	pv.Status = corev1.PersistentVolumeStatus{}
	created, err := client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	mustCreate("pv", err)
	created.Status.Phase = corev1.VolumeBound
	_, err = client.CoreV1().PersistentVolumes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
	mustCreate("pv status", err)
	pvc := boundPVC()
	pvc.Spec.AccessModes = pv.Spec.AccessModes
	pvc.Spec.Resources = corev1.VolumeResourceRequirements{Requests: pv.Spec.Capacity}
	_, err = client.CoreV1().PersistentVolumeClaims("app").Create(ctx, pvc, metav1.CreateOptions{})
	mustCreate("pvc", err)

	pod := podOn("db-0", with(guard, contract.AnnotationRestartOnDiskReturn, "true"), time.Time{})
	pod.UID = ""
	pod.Labels = map[string]string{"app": "db"}
	pod.Spec.Containers = []corev1.Container{{Name: "db", Image: "db"}}
	pod.Status = corev1.PodStatus{}
	createdPod, err := client.CoreV1().Pods("app").Create(ctx, pod, metav1.CreateOptions{})
	mustCreate("pod", err)
	createdPod.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &metav1.Time{Time: fakeAt.Add(time.Minute)},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	_, err = client.CoreV1().Pods("app").UpdateStatus(ctx, createdPod, metav1.UpdateOptions{})
	mustCreate("pod status", err)

	// maxUnavailable 0: no voluntary disruption of the one healthy pod.
	pdb, err := client.PolicyV1().PodDisruptionBudgets("app").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: ptrTo(intstr.FromInt32(0)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}},
	}, metav1.CreateOptions{})
	mustCreate("pdb", err)
	pdbStatus := func(allowed, desired int32) {
		t.Helper()
		cur, err := client.PolicyV1().PodDisruptionBudgets("app").Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: cur.Generation, DisruptionsAllowed: allowed,
			CurrentHealthy: 1, DesiredHealthy: desired, ExpectedPods: 1}
		if _, err := client.PolicyV1().PodDisruptionBudgets("app").UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pdbStatus(0, 1)

	cfg := config.Default()
	cfg.StateDir = testState
	fos := NewFakeOS(testState, "/dev")
	view, err := nodeagent.NewKubeView(client, "n1", clock, nodeagent.ViewOptions{TTL: time.Nanosecond, NotFoundTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(view.Shutdown)
	if err := view.Start(ctx); err != nil {
		t.Fatal(err)
	}
	recorder := kuberecord.NewFakeRecorder(100)
	c, err := New(nodeagent.Deps{NodeName: "n1", Config: cfg, Client: client, View: view, Recorder: recorder,
		Registerer: prometheus.NewRegistry(), Clock: clock}, fos, Options{LoopSearchLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the view to see the running pod", testenv.Until(func() bool {
		pods, _ := view.Pods().List(labels.Everything())
		return len(pods) == 1 && pods[0].Status.StartTime != nil
	}))
	var events []string
	pass := func() {
		t.Helper()
		clock.Step(time.Second) // past the view's TTL
		c.SyncOnce(ctx)
		for len(recorder.Events) > 0 {
			events = append(events, <-recorder.Events)
		}
	}
	podState := func() (gone bool, deleting bool) {
		t.Helper()
		p, err := client.CoreV1().Pods("app").Get(ctx, "db-0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return false, p.DeletionTimestamp != nil
	}

	// The disk is missing: the fake stands in (the pod starts on it).
	pass()
	if ourLink := fos.Links[testDisk]; ourLink == "" {
		t.Fatalf("no fake link at %s; events %v", testDisk, events)
	}
	// The real disk returns while kubelet still holds the fake for the pod.
	fos.Locked(func() {
		fos.Loops[0] = &Loop{Minor: 0, BackingFile: "/var/lib/kubelet/x", BackingIsDev: true, BackingMajor: LoopMajor, BackingMinor: 101}
		delete(fos.Links, testDisk)
		fos.Devices[testDisk] = true
	})
	const blockedPasses = 3
	for i := 0; i < blockedPasses; i++ {
		pass()
	}
	if got := evictions.get(); len(got) != blockedPasses || !allCodes(got, http.StatusTooManyRequests) {
		t.Fatalf("while the PDB allows no disruption every pass should try once and get 429, got %v", got)
	}
	if gone, deleting := podState(); gone || deleting {
		t.Fatalf("pod evicted although its PDB allowed no disruption")
	}
	if n := countEvents(events, contract.ReasonEvictedForRealDisk); n != 0 {
		t.Fatalf("%d %s events while blocked", n, contract.ReasonEvictedForRealDisk)
	}
	if n := countEvents(events, contract.ReasonEvictionBlocked); n != 1 {
		t.Errorf("want one %s event for the blocked eviction, got %d in %v", contract.ReasonEvictionBlocked, n, events)
	}

	// The budget is relaxed (maxUnavailable 1) and the disruption controller allows one.
	pdb, err = client.PolicyV1().PodDisruptionBudgets("app").Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Spec.MaxUnavailable = ptrTo(intstr.FromInt32(1))
	if _, err := client.PolicyV1().PodDisruptionBudgets("app").Update(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdbStatus(1, 0)
	pass()
	got := evictions.get()
	if len(got) != blockedPasses+1 || got[blockedPasses] != http.StatusCreated {
		t.Fatalf("after the PDB was relaxed the next pass should evict (201), got %v", got)
	}
	if gone, deleting := podState(); !gone && !deleting {
		t.Fatalf("pod not evicted after the PDB allowed it")
	}
	if n := countEvents(events, contract.ReasonEvictedForRealDisk); n != 1 {
		t.Fatalf("want one %s event, got %d in %v", contract.ReasonEvictedForRealDisk, n, events)
	}
	// The budget recorded the disruption: the apiserver's eviction, not a plain delete.
	pdb, err = client.PolicyV1().PodDisruptionBudgets("app").Get(ctx, "db", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pdb.Status.DisruptedPods["db-0"]; !ok || pdb.Status.DisruptionsAllowed != 0 {
		t.Fatalf("PDB status %+v: the eviction should be recorded in it", pdb.Status)
	}
	// Evicted once: later passes do not try again.
	pass()
	if got := evictions.get(); len(got) != blockedPasses+1 {
		t.Fatalf("evictions after the pod was evicted: %v", got)
	}
	t.Logf("eviction answers, pass by pass: %v; events: %v", evictions.get(), events)
}

func allCodes(codes []int, want int) bool {
	for _, c := range codes {
		if c != want {
			return false
		}
	}
	return true
}

func countEvents(events []string, reason string) int {
	n := 0
	for _, e := range events {
		if strings.Contains(e, " "+reason+" ") {
			n++
		}
	}
	return n
}

func ptrTo[T any](v T) *T { return &v }
