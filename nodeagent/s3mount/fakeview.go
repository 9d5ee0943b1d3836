package s3mount

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/pvrescue/pvrescue/nodeagent"
)

// FakeView is an in-memory nodeagent.ClusterView for unit tests. Set objects with Set and Delete;
// every change of a pod calls the registered OnPodChange functions. It counts reads by kind so
// tests can assert what the rescue asked for.
type FakeView struct {
	mu      sync.Mutex
	pods    cache.Indexer
	objs    map[string]any // kind/namespace/name
	onPod   []func()
	reads   map[string]int
	Node_   *corev1.Node
	ReadErr error // returned by every on-demand read when set
}

var _ nodeagent.ClusterView = (*FakeView)(nil)

// NewFakeView returns an empty view.
func NewFakeView() *FakeView {
	return &FakeView{pods: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}),
		objs: map[string]any{}, reads: map[string]int{}}
}

func fakeKey(kind, ns, name string) string { return kind + "/" + ns + "/" + name }

// Set adds or replaces objects (Pod, PersistentVolume, PersistentVolumeClaim, StorageClass,
// CSIDriver, VolumeAttachment, Secret).
func (v *FakeView) Set(objs ...any) {
	podChanged := false
	v.mu.Lock()
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Pod:
			_ = v.pods.Update(o)
			podChanged = true
		case *corev1.PersistentVolume:
			v.objs[fakeKey("PersistentVolume", "", o.Name)] = o
		case *corev1.PersistentVolumeClaim:
			v.objs[fakeKey("PersistentVolumeClaim", o.Namespace, o.Name)] = o
		case *storagev1.StorageClass:
			v.objs[fakeKey("StorageClass", "", o.Name)] = o
		case *storagev1.CSIDriver:
			v.objs[fakeKey("CSIDriver", "", o.Name)] = o
		case *storagev1.VolumeAttachment:
			v.objs[fakeKey("VolumeAttachment", "", o.Name)] = o
		case *corev1.Secret:
			v.objs[fakeKey("Secret", o.Namespace, o.Name)] = o
		}
	}
	fns := append([]func(){}, v.onPod...)
	v.mu.Unlock()
	if podChanged {
		for _, f := range fns {
			f()
		}
	}
}

// DeletePod removes a pod.
func (v *FakeView) DeletePod(namespace, name string) {
	v.mu.Lock()
	if o, ok, _ := v.pods.GetByKey(namespace + "/" + name); ok {
		_ = v.pods.Delete(o)
	}
	fns := append([]func(){}, v.onPod...)
	v.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// Reads returns how many on-demand reads of kind were made.
func (v *FakeView) Reads(kind string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.reads[kind]
}

func (v *FakeView) Pods() corelisters.PodLister { return corelisters.NewPodLister(v.pods) }

func (v *FakeView) OnPodChange(f func()) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.onPod = append(v.onPod, f)
}

func (v *FakeView) Node() (*corev1.Node, error) {
	if v.Node_ == nil {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "")
	}
	return v.Node_, nil
}

func (v *FakeView) get(kind, resource, ns, name string) (any, error) {
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

func (v *FakeView) PersistentVolume(_ context.Context, name string) (*corev1.PersistentVolume, error) {
	o, err := v.get("PersistentVolume", "persistentvolumes", "", name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.PersistentVolume), nil
}

func (v *FakeView) PersistentVolumeClaim(_ context.Context, ns, name string) (*corev1.PersistentVolumeClaim, error) {
	o, err := v.get("PersistentVolumeClaim", "persistentvolumeclaims", ns, name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.PersistentVolumeClaim), nil
}

func (v *FakeView) StorageClass(_ context.Context, name string) (*storagev1.StorageClass, error) {
	o, err := v.get("StorageClass", "storageclasses", "", name)
	if err != nil {
		return nil, err
	}
	return o.(*storagev1.StorageClass), nil
}

func (v *FakeView) CSIDriver(_ context.Context, name string) (*storagev1.CSIDriver, error) {
	o, err := v.get("CSIDriver", "csidrivers", "", name)
	if err != nil {
		return nil, err
	}
	return o.(*storagev1.CSIDriver), nil
}

func (v *FakeView) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	o, err := v.get("Secret", "secrets", ns, name)
	if err != nil {
		return nil, err
	}
	return o.(*corev1.Secret), nil
}

// VolumeAttachment implements nodeagent.ClusterView.
func (v *FakeView) VolumeAttachment(_ context.Context, name string) (*storagev1.VolumeAttachment, error) {
	o, err := v.get("VolumeAttachment", "volumeattachments", "", name)
	if err != nil {
		return nil, err
	}
	return o.(*storagev1.VolumeAttachment), nil
}

func (v *FakeView) Forget(string, string, string) {}
