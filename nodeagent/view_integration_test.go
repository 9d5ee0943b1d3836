//go:build integration

package nodeagent

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// recordedRequest is one request the view's client sent.
type recordedRequest struct {
	method string
	path   string
	query  url.Values
}

// requestRecorder wraps a client's transport and keeps every request it sends.
type requestRecorder struct {
	mu   sync.Mutex
	reqs []recordedRequest
	next http.RoundTripper
}

func (r *requestRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, recordedRequest{method: req.Method, path: req.URL.Path, query: req.URL.Query()})
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

func (r *requestRecorder) snapshot() []recordedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recordedRequest(nil), r.reqs...)
}

// TestKubeViewReadsOnlyItsNode runs the view against a real kube-apiserver holding two nodes'
// pods and PVs, and checks from the requests its client sent and the objects it holds that the
// pod and node informers list and watch this node's objects only, and that PVs/PVCs are read by
// name, one GET per object per TTL, never listed or watched.
func TestKubeViewReadsOnlyItsNode(t *testing.T) {
	_, cfg := testenv.APIServer(t)
	admin, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "default"
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			name := n + "-" + string(rune('0'+i))
			if err := createBoundVolume(ctx, admin, ns, name); err != nil {
				t.Fatal(err)
			}
			if _, err := admin.CoreV1().Pods(ns).Create(ctx, podOn(ns, name, n), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	rec := &requestRecorder{}
	vcfg := rest.CopyConfig(cfg)
	vcfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec })
	client, err := kubernetes.NewForConfig(vcfg)
	if err != nil {
		t.Fatal(err)
	}
	v, changed := startNodeView(ctx, t, client, ViewOptions{TTL: time.Hour})

	// A pod created later on the other node, then one on this node: the watch delivers in
	// resourceVersion order, so once the second is seen the first would have been too.
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, podOn(ns, "late-b", "node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, podOn(ns, "late-a", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := v.Pods().Pods(ns).Get("late-a")
		return err == nil, nil
	}); err != nil {
		t.Fatalf("pod late-a never reached the view: %v", err)
	}
	pods, err := v.Pods().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 4 {
		t.Errorf("view holds %d pods, want node-a's 4", len(pods))
	}
	for _, p := range pods {
		if p.Spec.NodeName != "node-a" {
			t.Errorf("view holds pod %s of node %q", p.Name, p.Spec.NodeName)
		}
	}
	if len(changed) == 0 {
		t.Error("OnPodChange was never called")
	}
	node, err := v.Node()
	if err != nil || node.Name != "node-a" {
		t.Fatalf("Node() = %v, %v; want node-a", node, err)
	}

	for i := 0; i < 3; i++ { // repeated reads are served from the cache
		if _, err := v.PersistentVolume(ctx, "node-a-0"); err != nil {
			t.Fatal(err)
		}
		if _, err := v.PersistentVolumeClaim(ctx, ns, "node-a-0"); err != nil {
			t.Fatal(err)
		}
	}

	var podWatch, nodeWatch bool
	gets := map[string]int{}
	for _, r := range rec.snapshot() {
		switch {
		case r.path == "/api/v1/pods":
			if got := r.query.Get("fieldSelector"); got != "spec.nodeName=node-a" {
				t.Errorf("%s %s?%s: pods requested without this node's field selector", r.method, r.path, r.query.Encode())
			}
			podWatch = podWatch || r.query.Get("watch") == "true"
		case r.path == "/api/v1/nodes":
			if got := r.query.Get("fieldSelector"); got != "metadata.name=node-a" {
				t.Errorf("%s %s?%s: nodes requested without this node's name", r.method, r.path, r.query.Encode())
			}
			nodeWatch = nodeWatch || r.query.Get("watch") == "true"
		case strings.Contains(r.path, "persistentvolume"):
			if r.method != http.MethodGet || r.query.Get("watch") != "" || strings.HasSuffix(r.path, "persistentvolumes") || strings.HasSuffix(r.path, "persistentvolumeclaims") {
				t.Errorf("%s %s?%s: a PV/PVC request that is not a read of one named object", r.method, r.path, r.query.Encode())
			}
			gets[r.path]++
		default:
			t.Errorf("unexpected request %s %s?%s", r.method, r.path, r.query.Encode())
		}
	}
	if !podWatch || !nodeWatch {
		t.Errorf("pod watch seen %v, node watch seen %v; want both (informers)", podWatch, nodeWatch)
	}
	want := map[string]int{"/api/v1/persistentvolumes/node-a-0": 1, "/api/v1/namespaces/default/persistentvolumeclaims/node-a-0": 1}
	if len(gets) != len(want) || gets["/api/v1/persistentvolumes/node-a-0"] != 1 || gets["/api/v1/namespaces/default/persistentvolumeclaims/node-a-0"] != 1 {
		t.Errorf("named reads = %v, want exactly %v (one GET each, then the cache)", gets, want)
	}
}

func podOn(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}}}
}

func createBoundVolume(ctx context.Context, cs kubernetes.Interface, ns, name string) error {
	fs := corev1.PersistentVolumeFilesystem
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeMode: &fs,
			ClaimRef: &corev1.ObjectReference{Namespace: ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "example.csi", VolumeHandle: name}},
		}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	sc := ""
	_, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &sc, VolumeName: name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{})
	return err
}

// startNodeView starts a KubeView of node-a with opts; changed receives on every pod change. It
// stops when the test ends.
func startNodeView(ctx context.Context, t *testing.T, client kubernetes.Interface, opts ViewOptions) (*KubeView, chan struct{}) {
	t.Helper()
	v, err := NewKubeView(client, "node-a", clock.RealClock{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 100)
	v.OnPodChange(func() { changed <- struct{}{} })
	vctx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); v.Shutdown() })
	if err := v.Start(vctx); err != nil {
		t.Fatal(err)
	}
	return v, changed
}
