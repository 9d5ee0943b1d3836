// Package nodeagenttest holds test support for the rescues: one in-memory nodeagent.ClusterView.
// It is imported by tests only, never by shipped code.
package nodeagenttest

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/pvrescue/pvrescue/nodeagent"
)

// FakeView is an in-memory nodeagent.ClusterView for unit tests. Set objects with Set and Delete
// (or copy a fake clientset's objects with SyncFrom); every change of a pod calls the registered
// OnPodChange functions. It counts reads by kind so tests can assert what the rescue asked for.
type FakeView struct {
	mu    sync.Mutex
	pods  cache.Indexer
	objs  map[string]any // kind/namespace/name
	node  *corev1.Node
	onPod []func()
	reads map[string]int
	// ReadErr, when set, is returned by every on-demand read (an API server that does not answer).
	ReadErr error
	// BeforeRead, when set, runs at the start of every on-demand read, with the kind read (an API
	// server that takes its time; set it before the view is shared).
	BeforeRead func(kind string)
	// RequireConsent makes Pods list only the pods nodeagent.Consents allows, judged from the
	// Namespaces Set here (as nodeagent.ViewOptions.RequireConsent); off, every pod is listed.
	// Set it before the view is shared.
	RequireConsent bool
}

var _ nodeagent.ClusterView = (*FakeView)(nil)

// NewFakeView returns an empty view.
func NewFakeView() *FakeView {
	return &FakeView{pods: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		objs: map[string]any{}, reads: map[string]int{}}
}

func fakeKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// kindOf names the kind of a supported object ("" for others).
func kindOf(o any) string {
	switch o.(type) {
	case *corev1.Pod:
		return "Pod"
	case *corev1.Node:
		return "Node"
	case *corev1.Namespace:
		return "Namespace"
	case *corev1.PersistentVolume:
		return "PersistentVolume"
	case *corev1.PersistentVolumeClaim:
		return "PersistentVolumeClaim"
	case *storagev1.StorageClass:
		return "StorageClass"
	case *storagev1.CSIDriver:
		return "CSIDriver"
	case *storagev1.VolumeAttachment:
		return "VolumeAttachment"
	case *corev1.Secret:
		return "Secret"
	}
	return ""
}

// Set adds or replaces objects (Pod, Node, Namespace, PersistentVolume, PersistentVolumeClaim,
// StorageClass, CSIDriver, VolumeAttachment, Secret). The view's node is the last Node set.
// An object of another type is a test's mistake: Set panics.
func (v *FakeView) Set(objs ...any) {
	v.change(func() bool {
		podChanged := false
		for _, o := range objs {
			podChanged = v.setLocked(o) || podChanged
		}
		return podChanged
	})
}

// Delete removes objects (by kind, namespace and name; the rest of each object is ignored).
func (v *FakeView) Delete(objs ...any) {
	v.change(func() bool {
		podChanged := false
		for _, o := range objs {
			m, err := meta.Accessor(o)
			if err != nil {
				panic(fmt.Sprintf("nodeagenttest: Delete of %T: %v", o, err))
			}
			switch kindOf(o) {
			case "Pod":
				if p, ok, _ := v.pods.GetByKey(m.GetNamespace() + "/" + m.GetName()); ok {
					_ = v.pods.Delete(p) // an indexer's Delete fails only for an object without a key
					podChanged = true
				}
			case "Node":
				v.node = nil
			case "Namespace":
				delete(v.objs, fakeKey("Namespace", "", m.GetName()))
				podChanged = podChanged || v.RequireConsent
			case "":
				panic(fmt.Sprintf("nodeagenttest: Delete of unsupported %T", o))
			default:
				delete(v.objs, fakeKey(kindOf(o), m.GetNamespace(), m.GetName()))
			}
		}
		return podChanged
	})
}

// DeletePod removes a pod.
func (v *FakeView) DeletePod(namespace, name string) {
	v.Delete(&corev1.Pod{ObjectMeta: metaOf(namespace, name)})
}

// setLocked stores one object and says whether it was a pod.
func (v *FakeView) setLocked(o any) bool {
	m, err := meta.Accessor(o)
	if err != nil {
		panic(fmt.Sprintf("nodeagenttest: Set of %T: %v", o, err))
	}
	switch o := o.(type) {
	case *corev1.Pod:
		_ = v.pods.Update(o) // an indexer's Update fails only for an object without a key
		return true
	case *corev1.Node:
		v.node = o
	case *corev1.Namespace:
		v.objs[fakeKey("Namespace", "", m.GetName())] = o
		return v.RequireConsent // which pods the rescues see may change
	default:
		kind := kindOf(o)
		if kind == "" {
			panic(fmt.Sprintf("nodeagenttest: Set of unsupported %T", o))
		}
		v.objs[fakeKey(kind, m.GetNamespace(), m.GetName())] = o
	}
	return false
}

// change runs f under the lock, then the OnPodChange functions (outside it) when f changed a pod.
func (v *FakeView) change(f func() (podChanged bool)) {
	v.mu.Lock()
	podChanged := f()
	fns := append([]func(){}, v.onPod...)
	v.mu.Unlock()
	if podChanged {
		for _, fn := range fns {
			fn()
		}
	}
}

// resources the view holds, as a fake clientset's tracker names them.
var resources = []struct {
	gvr schema.GroupVersionResource
	gvk schema.GroupVersionKind
}{
	{corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod")},
	{corev1.SchemeGroupVersion.WithResource("nodes"), corev1.SchemeGroupVersion.WithKind("Node")},
	{corev1.SchemeGroupVersion.WithResource("namespaces"), corev1.SchemeGroupVersion.WithKind("Namespace")},
	{corev1.SchemeGroupVersion.WithResource("persistentvolumes"), corev1.SchemeGroupVersion.WithKind("PersistentVolume")},
	{corev1.SchemeGroupVersion.WithResource("persistentvolumeclaims"), corev1.SchemeGroupVersion.WithKind("PersistentVolumeClaim")},
	{corev1.SchemeGroupVersion.WithResource("secrets"), corev1.SchemeGroupVersion.WithKind("Secret")},
	{storagev1.SchemeGroupVersion.WithResource("storageclasses"), storagev1.SchemeGroupVersion.WithKind("StorageClass")},
	{storagev1.SchemeGroupVersion.WithResource("csidrivers"), storagev1.SchemeGroupVersion.WithKind("CSIDriver")},
	{storagev1.SchemeGroupVersion.WithResource("volumeattachments"), storagev1.SchemeGroupVersion.WithKind("VolumeAttachment")},
}

// SyncFrom makes the view hold what a fake clientset's tracker holds: the pods bound to
// nodeName, that Node, and every object of the other kinds — so a test keeps the clientset as
// the one truth and sees what the rescue wrote through it on its next pass. It reads the tracker
// directly: the clientset's reactors (and the counts tests keep in them) see nothing. The
// OnPodChange functions are called once.
func (v *FakeView) SyncFrom(tracker k8stesting.ObjectTracker, nodeName string) error {
	var objs []any
	for _, r := range resources {
		list, err := tracker.List(r.gvr, r.gvk, "")
		if err != nil {
			return fmt.Errorf("list %s: %w", r.gvr.Resource, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			return fmt.Errorf("list %s: %w", r.gvr.Resource, err)
		}
		for _, o := range items {
			switch o := o.(type) {
			case *corev1.Pod:
				if o.Spec.NodeName != nodeName {
					continue
				}
			case *corev1.Node:
				if o.Name != nodeName {
					continue
				}
			}
			objs = append(objs, o)
		}
	}
	v.change(func() bool {
		// Replace keeps the indexer, so listers handed out before stay current.
		_ = v.pods.Replace(nil, "") // fails only for an object without a key; there is none
		v.objs, v.node = map[string]any{}, nil
		for _, o := range objs {
			v.setLocked(o)
		}
		return true
	})
	return nil
}

// Reads returns how many on-demand reads of kind were made.
func (v *FakeView) Reads(kind string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reads[kind]
}

// Pods implements nodeagent.ClusterView.
func (v *FakeView) Pods() corelisters.PodLister {
	v.mu.Lock()
	defer v.mu.Unlock()
	l := corelisters.NewPodLister(v.pods)
	if !v.RequireConsent {
		return l
	}
	return nodeagent.ConsentingPods(l, v.namespace)
}

// namespace is the fake's nodeagent.NamespaceGetter.
func (v *FakeView) namespace(name string) (*corev1.Namespace, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	ns, ok := v.objs[fakeKey("Namespace", "", name)].(*corev1.Namespace)
	return ns, ok
}

// OnPodChange implements nodeagent.ClusterView.
func (v *FakeView) OnPodChange(f func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.onPod = append(v.onPod, f)
}

// Node implements nodeagent.ClusterView.
func (v *FakeView) Node() (*corev1.Node, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.node == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "")
	}
	return v.node, nil
}

func (v *FakeView) get(kind, resource, ns, name string) (any, error) {
	if v.BeforeRead != nil {
		v.BeforeRead(kind)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.reads[kind]++
	if v.ReadErr != nil {
		return nil, v.ReadErr
	}
	o, ok := v.objs[fakeKey(kind, ns, name)]
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: resource}, name)
	}
	return o, nil
}

// read is get for one typed kind.
func read[T any](v *FakeView, kind, resource, ns, name string) (T, error) {
	var zero T
	o, err := v.get(kind, resource, ns, name)
	if err != nil {
		return zero, err
	}
	return o.(T), nil
}

// PersistentVolume implements nodeagent.ClusterView.
func (v *FakeView) PersistentVolume(_ context.Context, name string) (*corev1.PersistentVolume, error) {
	return read[*corev1.PersistentVolume](v, "PersistentVolume", "persistentvolumes", "", name)
}

// PersistentVolumeClaim implements nodeagent.ClusterView.
func (v *FakeView) PersistentVolumeClaim(_ context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	return read[*corev1.PersistentVolumeClaim](v, "PersistentVolumeClaim", "persistentvolumeclaims", ns, name)
}

// StorageClass implements nodeagent.ClusterView.
func (v *FakeView) StorageClass(_ context.Context, name string) (*storagev1.StorageClass, error) {
	return read[*storagev1.StorageClass](v, "StorageClass", "storageclasses", "", name)
}

// CSIDriver implements nodeagent.ClusterView.
func (v *FakeView) CSIDriver(_ context.Context, name string) (*storagev1.CSIDriver, error) {
	return read[*storagev1.CSIDriver](v, "CSIDriver", "csidrivers", "", name)
}

// Secret implements nodeagent.ClusterView.
func (v *FakeView) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	return read[*corev1.Secret](v, "Secret", "secrets", ns, name)
}

// VolumeAttachment implements nodeagent.ClusterView.
func (v *FakeView) VolumeAttachment(_ context.Context, name string) (*storagev1.VolumeAttachment, error) {
	return read[*storagev1.VolumeAttachment](v, "VolumeAttachment", "volumeattachments", "", name)
}

// Forget implements nodeagent.ClusterView: the fake keeps no cache, so there is nothing to drop.
func (v *FakeView) Forget(string, string, string) {}

func metaOf(namespace, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: name}
}
