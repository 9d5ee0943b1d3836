package nodeagent

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
)

func countGets(cs *fake.Clientset, resource string) int {
	n := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == resource {
			n++
		}
	}
	return n
}

func TestKubeViewCachesReadsForTTLAndStripsManagedFields(t *testing.T) {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1",
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager"}}}}
	cs := fake.NewClientset(pv)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	v, err := NewKubeView(cs, "n1", clk, ViewOptions{TTL: 10 * time.Second, NotFoundTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		got, err := v.PersistentVolume(ctx, "pv1")
		if err != nil {
			t.Fatal(err)
		}
		if len(got.ManagedFields) != 0 {
			t.Fatalf("managedFields kept: %v", got.ManagedFields)
		}
	}
	if n := countGets(cs, "persistentvolumes"); n != 1 {
		t.Fatalf("3 reads within the TTL made %d GETs, want 1", n)
	}
	clk.Step(11 * time.Second)
	if _, err := v.PersistentVolume(ctx, "pv1"); err != nil {
		t.Fatal(err)
	}
	if n := countGets(cs, "persistentvolumes"); n != 2 {
		t.Fatalf("read after the TTL made %d GETs in all, want 2", n)
	}
	v.Forget("PersistentVolume", "", "pv1")
	if _, err := v.PersistentVolume(ctx, "pv1"); err != nil {
		t.Fatal(err)
	}
	if n := countGets(cs, "persistentvolumes"); n != 3 {
		t.Fatalf("read after Forget made %d GETs in all, want 3", n)
	}

	// NotFound is remembered for NotFoundTTL only.
	for i := 0; i < 2; i++ {
		if _, err := v.PersistentVolumeClaim(ctx, "ns", "gone"); !apierrors.IsNotFound(err) {
			t.Fatalf("missing claim: err = %v, want NotFound", err)
		}
	}
	if n := countGets(cs, "persistentvolumeclaims"); n != 1 {
		t.Fatalf("two reads of a missing claim made %d GETs, want 1", n)
	}
	clk.Step(3 * time.Second)
	if _, err := v.PersistentVolumeClaim(ctx, "ns", "gone"); !apierrors.IsNotFound(err) {
		t.Fatalf("err = %v", err)
	}
	if n := countGets(cs, "persistentvolumeclaims"); n != 2 {
		t.Fatalf("read after NotFoundTTL made %d GETs in all, want 2", n)
	}
}

func TestKubeViewBoundsItsCache(t *testing.T) {
	var objs []corev1.PersistentVolume
	cs := fake.NewClientset()
	for _, n := range []string{"a", "b", "c"} {
		pv := corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: n}}
		objs = append(objs, pv)
		if _, err := cs.CoreV1().PersistentVolumes().Create(context.Background(), &pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	v, err := NewKubeView(cs, "n1", clocktesting.NewFakeClock(time.Unix(0, 0)), ViewOptions{MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, pv := range objs {
		if _, err := v.PersistentVolume(context.Background(), pv.Name); err != nil {
			t.Fatal(err)
		}
	}
	if len(v.entries) != 2 {
		t.Fatalf("cache holds %d entries, want at most 2", len(v.entries))
	}
	if _, ok := v.entries[viewKey("PersistentVolume", "", "a")]; ok {
		t.Fatal("the oldest entry was kept past the bound")
	}
}

func TestKubeViewSecretsAreNeverCached(t *testing.T) {
	cs := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"}})
	v, err := NewKubeView(cs, "n1", nil, ViewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := v.Secret(context.Background(), "ns", "s"); err != nil {
			t.Fatal(err)
		}
	}
	if n := countGets(cs, "secrets"); n != 2 {
		t.Fatalf("two secret reads made %d GETs, want 2 (never cached)", n)
	}
}

func TestKubeViewPodsAndNodeFromInformers(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "x"}}}, Spec: corev1.PodSpec{NodeName: "n1"}},
	)
	v, err := NewKubeView(cs, "n1", nil, ViewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 10)
	v.OnPodChange(func() { changed <- struct{}{} })
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); v.Shutdown() }()
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no pod change callback for the initial pod")
	}
	p, err := v.Pods().Pods("ns").Get("p")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.ManagedFields) != 0 {
		t.Fatal("pod managedFields kept in the informer cache")
	}
	if n, err := v.Node(); err != nil || n.Name != "n1" {
		t.Fatalf("Node() = %v, %v", n, err)
	}
	// The informers ask the apiserver for this node's objects only.
	want := map[string]string{"pods": "spec.nodeName=n1", "nodes": "metadata.name=n1"}
	seen := 0
	for _, a := range cs.Actions() {
		la, ok := a.(k8stesting.ListAction)
		if !ok {
			continue
		}
		seen++
		res := a.GetResource().Resource
		if got := la.GetListRestrictions().Fields.String(); got != want[res] {
			t.Errorf("list of %s used field selector %q, want %q", res, got, want[res])
		}
	}
	if seen != 2 {
		t.Errorf("saw %d list calls, want 2 (pods, node)", seen)
	}
}

// A key forgotten and read again takes a fresh place in the eviction order: its stale, older
// place must not evict the fresh entry.
func TestKubeViewEvictionIgnoresStalePositions(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "a"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "b"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "c"}},
	)
	v, err := NewKubeView(cs, "n1", clocktesting.NewFakeClock(time.Unix(1000, 0)), ViewOptions{TTL: time.Hour, MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	read := func(name string) {
		t.Helper()
		if _, err := v.PersistentVolume(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	read("a")
	read("b")
	v.Forget("PersistentVolume", "", "a")
	read("a") // a is now newer than b
	read("c") // over the bound: b, the oldest live entry, goes; a stays
	before := countGets(cs, "persistentvolumes")
	read("a")
	if n := countGets(cs, "persistentvolumes") - before; n != 0 {
		t.Fatalf("fresh entry a was evicted through its stale position (%d GETs)", n)
	}
	read("b")
	if n := countGets(cs, "persistentvolumes") - before; n != 1 {
		t.Fatalf("b should have been evicted as the oldest entry, GETs = %d", n)
	}
}

func TestStripManagedFieldsDropsLastApplied(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p",
		Annotations:   map[string]string{LastAppliedAnnotation: `{"huge":"copy"}`, "pvrescue.io/x": "kept"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
	if _, err := StripManagedFields(p); err != nil {
		t.Fatal(err)
	}
	if p.ManagedFields != nil || len(p.Annotations) != 1 || p.Annotations["pvrescue.io/x"] != "kept" {
		t.Fatalf("after strip: managedFields %v, annotations %v", p.ManagedFields, p.Annotations)
	}
}

// An unbound claim is served but kept only for NotFoundTTL, so its binding is seen promptly; a
// bound one is kept for the TTL.
func TestKubeViewKeepsUnboundClaimsBriefly(t *testing.T) {
	cs := fake.NewClientset(
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "bound"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}},
	)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	v, err := NewKubeView(cs, "n1", clk, ViewOptions{TTL: time.Hour, NotFoundTTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, name := range []string{"pending", "bound"} {
		if _, err := v.PersistentVolumeClaim(ctx, "ns", name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	clk.Step(6 * time.Second)
	for _, name := range []string{"pending", "bound"} {
		if _, err := v.PersistentVolumeClaim(ctx, "ns", name); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if n := countGets(cs, "persistentvolumeclaims"); n != 3 {
		t.Fatalf("GETs = %d, want 3 (the unbound claim read again after NotFoundTTL, the bound one cached)", n)
	}
}

// While the API server cannot be read, an expired (or forgotten) copy is served rather than an
// error, so the rescues keep what they hold; a NotFound is never served that way, and a
// deletion seen once the API server answers again is reported.
func TestKubeViewServesLastCopyWhileAPIServerAway(t *testing.T) {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv1"}}
	cs := fake.NewClientset(pv)
	away := false
	cs.PrependReactor("get", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if away {
			return true, nil, errors.New("dial tcp: connect: connection refused")
		}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	v, err := NewKubeView(cs, "n1", clk, ViewOptions{TTL: 10 * time.Second, NotFoundTTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := v.PersistentVolume(ctx, "pv1"); err != nil {
		t.Fatal(err)
	}
	away = true
	clk.Step(time.Minute)
	got, err := v.PersistentVolume(ctx, "pv1")
	if err != nil || got.Name != "pv1" {
		t.Fatalf("expired copy while away: %v, %v; want the last copy", got, err)
	}
	v.Forget("PersistentVolume", "", "pv1")
	if _, err := v.PersistentVolume(ctx, "pv1"); err != nil {
		t.Fatalf("forgotten copy while away: %v; want the last copy", err)
	}
	if n := v.StaleServed(); n != 2 {
		t.Fatalf("StaleServed = %d, want 2", n)
	}
	// Never read before: the error, not an empty answer.
	if _, err := v.PersistentVolume(ctx, "other"); err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("unknown PV while away: err = %v, want the transport error", err)
	}
	// Back, and the PV was deleted meanwhile: a forgotten copy is re-read and the NotFound wins.
	away = false
	if err := cs.CoreV1().PersistentVolumes().Delete(ctx, "pv1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	v.Forget("PersistentVolume", "", "pv1")
	if _, err := v.PersistentVolume(ctx, "pv1"); !apierrors.IsNotFound(err) {
		t.Fatalf("deleted PV after Forget: err = %v, want NotFound", err)
	}
	// A remembered NotFound is not a fallback either.
	away = true
	clk.Step(time.Minute)
	if _, err := v.PersistentVolume(ctx, "pv1"); err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("deleted PV while away: err = %v, want the transport error", err)
	}
}
