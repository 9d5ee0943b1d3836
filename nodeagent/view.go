package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// ClusterView is what one agent reads of the cluster, scoped to its own node so that the
// apiserver's cost of N agents grows with what runs on each node, not with the cluster:
//
//   - pods bound to this node and this Node object come from one shared informer factory, each
//     informer limited by a field selector (spec.nodeName, metadata.name);
//   - PVs, PVCs, StorageClasses and CSIDrivers are read on demand by name — only the ones this
//     node's pods and this node's rescue state name — and kept for a short TTL in a bounded cache;
//   - Secrets are never cached.
//
// Everything returned is shared: callers must not modify it. managedFields are stripped.
type ClusterView interface {
	// Pods lists the pods bound to this node that the agent may act for: by default only those
	// Consents allows (their namespace opted in, the pod did not opt out); every pod of the node
	// with the configuration's rescueAllNamespaces.
	Pods() corelisters.PodLister
	// OnPodChange registers f, called after any add, update or delete of a pod on this node,
	// and after a namespace's consent changed.
	// f runs on the informer's delivery goroutine: it must not block (signal a worker).
	// Register before Start.
	OnPodChange(f func())
	// Node returns this node from the cache.
	Node() (*corev1.Node, error)
	PersistentVolume(ctx context.Context, name string) (*corev1.PersistentVolume, error)
	PersistentVolumeClaim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
	StorageClass(ctx context.Context, name string) (*storagev1.StorageClass, error)
	CSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error)
	// VolumeAttachment reads a VolumeAttachment by name (kubelet's name for a volume on a node);
	// Forget it when it is not attached yet, so the next read is live.
	VolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
	// Secret is always a live read.
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	// Forget drops a cached object so the next read is live (after a write, or on a hint that it
	// changed). kind is "PersistentVolume", "PersistentVolumeClaim", "StorageClass", "CSIDriver"
	// or "VolumeAttachment".
	Forget(kind, namespace, name string)
}

// ViewOptions tune the on-demand cache.
type ViewOptions struct {
	// TTL is how long an object read on demand is served from memory (default 10m). What the
	// rescues read of a bound PV/PVC, a StorageClass or a CSIDriver does not change (a bound
	// claim's volumeName, a PV's source, secret refs and node affinity are immutable), and the
	// agent Forgets what it writes; a short TTL would only cost requests: every pass reads every
	// volume of the node, so 700 volumes at 30s were 47 GET/s per node, above client-go's
	// default 5 QPS (measured by hack/bench's scale section). An unbound claim is kept for
	// NotFoundTTL only, so its binding is seen promptly.
	TTL time.Duration
	// NotFoundTTL is how long a NotFound answer is remembered (default 5s).
	NotFoundTTL time.Duration
	// MaxEntries bounds the cache; the oldest entries go first (default 4096).
	MaxEntries int
	// RequireConsent makes Pods list only the pods Consents allows, judged from the Namespace
	// objects of one more informer (every namespace of the cluster: list and watch, managed
	// fields stripped). The agent sets it from the configuration (rescueAllNamespaces false, the
	// default); the zero value, every pod of the node, is for tests and tools that build a view
	// of their own.
	RequireConsent bool
}

func (o *ViewOptions) defaults() {
	if o.TTL <= 0 {
		o.TTL = 10 * time.Minute
	}
	if o.NotFoundTTL <= 0 {
		o.NotFoundTTL = 5 * time.Second
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = 4096
	}
}

// KubeView is the ClusterView of a running agent.
type KubeView struct {
	client  kubernetes.Interface
	clock   clock.PassiveClock
	opts    ViewOptions
	factory informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	nodes   cache.SharedIndexInformer
	// namespaces is nil unless opts.RequireConsent.
	namespaces cache.SharedIndexInformer

	reads singleflight.Group // one live read per key at a time
	// staleServed counts reads answered from an expired copy because the API server failed.
	staleServed atomic.Int64

	mu      sync.Mutex
	entries map[string]viewEntry
	order   []orderKey // insertion order, for eviction
	seq     uint64
	podFns  []func()
}

type viewEntry struct {
	obj     runtime.Object
	err     error // a NotFound answer
	expires time.Time
	seq     uint64 // which store put it there (order may hold older, stale positions of the key)
}

type orderKey struct {
	key string
	seq uint64
}

// NewKubeView builds the view of nodeName; Start runs it.
func NewKubeView(client kubernetes.Interface, nodeName string, clk clock.PassiveClock, opts ViewOptions) (*KubeView, error) {
	if client == nil || nodeName == "" {
		return nil, errors.New("nodeagent: a client and a node name are required for the cluster view")
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	opts.defaults()
	v := &KubeView{client: client, clock: clk, opts: opts, entries: map[string]viewEntry{}}
	v.factory = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(StripManagedFields))
	v.pods = v.factory.InformerFor(&corev1.Pod{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return newFilteredPodInformer(c, "spec.nodeName", nodeName, resync)
	})
	v.nodes = v.factory.InformerFor(&corev1.Node{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return newFilteredNodeInformer(c, nodeName, resync)
	})
	if _, err := v.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { v.podChanged() },
		UpdateFunc: func(any, any) { v.podChanged() },
		DeleteFunc: func(any) { v.podChanged() },
	}); err != nil {
		return nil, fmt.Errorf("nodeagent: pod handler: %w", err)
	}
	if opts.RequireConsent {
		v.namespaces = v.factory.Core().V1().Namespaces().Informer()
		// A namespace that opts in or out changes which pods the rescues see: they look again.
		if _, err := v.namespaces.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(o any) {
				if optedIn(o) {
					v.podChanged()
				}
			},
			UpdateFunc: func(old, cur any) {
				if optedIn(old) != optedIn(cur) {
					v.podChanged()
				}
			},
			DeleteFunc: func(any) { v.podChanged() },
		}); err != nil {
			return nil, fmt.Errorf("nodeagent: namespace handler: %w", err)
		}
	}
	return v, nil
}

// optedIn reports whether o is a Namespace labelled for pvrescue.
func optedIn(o any) bool {
	ns, ok := o.(*corev1.Namespace)
	return ok && ns.Labels[contract.LabelInject] == contract.LabelInjectEnabled
}

// namespace is the NamespaceGetter of the view's informer.
func (v *KubeView) namespace(name string) (*corev1.Namespace, bool) {
	o, ok, err := v.namespaces.GetIndexer().GetByKey(name)
	if err != nil || !ok {
		return nil, false
	}
	ns, ok := o.(*corev1.Namespace)
	return ns, ok
}

func newFilteredPodInformer(c kubernetes.Interface, field, value string, resync time.Duration) cache.SharedIndexInformer {
	return coreinformers.NewFilteredPodInformer(c, metav1.NamespaceAll, resync,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector(field, value).String()
		})
}

func newFilteredNodeInformer(c kubernetes.Interface, name string, resync time.Duration) cache.SharedIndexInformer {
	return coreinformers.NewFilteredNodeInformer(c, resync, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	})
}

// LastAppliedAnnotation is kubectl's copy of the whole applied object, as large as the object.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// StripManagedFields is an informer transform dropping managedFields and kubectl's
// last-applied-configuration annotation, which together can be most of an object's size and are
// never read by the agent.
func StripManagedFields(obj any) (any, error) {
	if m, err := metaAccessor(obj); err == nil {
		m.SetManagedFields(nil)
		if a := m.GetAnnotations(); a != nil {
			if _, ok := a[LastAppliedAnnotation]; ok {
				delete(a, LastAppliedAnnotation)
				m.SetAnnotations(a)
			}
		}
	}
	return obj, nil
}

func (v *KubeView) podChanged() {
	v.mu.Lock()
	fns := append([]func(){}, v.podFns...)
	v.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// Start starts the informers and waits for their caches; the informers stop with ctx.
func (v *KubeView) Start(ctx context.Context) error {
	v.StartInformers(ctx)
	return v.WaitForSync(ctx)
}

// StartInformers starts the informers without waiting; they stop with ctx. The agent serves
// /healthz and /metrics meanwhile and its rescues wait in WaitForSync (AfterSync), so an API
// server that is away at start delays the rescues without failing the liveness probe.
func (v *KubeView) StartInformers(ctx context.Context) { v.factory.Start(ctx.Done()) }

// WaitForSync waits until the informers listed this node's pods and Node (and, with
// RequireConsent, the namespaces) once; it fails only
// when ctx is done first. Once synced, the informers keep their last state through an API
// server outage (their reflectors relist when it answers again).
func (v *KubeView) WaitForSync(ctx context.Context) error {
	for typ, ok := range v.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("nodeagent: cache of %v did not sync: %w", typ, ctx.Err())
		}
	}
	return nil
}

// HasSynced reports whether the informers listed once.
func (v *KubeView) HasSynced() bool {
	return v.pods.HasSynced() && v.nodes.HasSynced() && (v.namespaces == nil || v.namespaces.HasSynced())
}

// Shutdown waits for the informers to stop (after ctx of Start is done).
func (v *KubeView) Shutdown() { v.factory.Shutdown() }

// Pods implements ClusterView.
func (v *KubeView) Pods() corelisters.PodLister {
	l := corelisters.NewPodLister(v.pods.GetIndexer())
	if v.namespaces == nil {
		return l
	}
	return ConsentingPods(l, v.namespace)
}

// OnPodChange implements ClusterView.
func (v *KubeView) OnPodChange(f func()) {
	v.mu.Lock()
	v.podFns = append(v.podFns, f)
	v.mu.Unlock()
}

// Node implements ClusterView.
func (v *KubeView) Node() (*corev1.Node, error) {
	items := v.nodes.GetStore().List()
	if len(items) == 0 {
		return nil, apierrors.NewNotFound(corev1.Resource("nodes"), "")
	}
	return items[0].(*corev1.Node), nil
}

// PersistentVolume implements ClusterView.
func (v *KubeView) PersistentVolume(ctx context.Context, name string) (*corev1.PersistentVolume, error) {
	obj, err := v.get(ctx, "PersistentVolume", "", name, func(ctx context.Context) (runtime.Object, error) {
		return v.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.PersistentVolume), nil
}

// PersistentVolumeClaim implements ClusterView.
func (v *KubeView) PersistentVolumeClaim(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	obj, err := v.get(ctx, "PersistentVolumeClaim", namespace, name, func(ctx context.Context) (runtime.Object, error) {
		pvc, err := v.client.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, name, metav1.GetOptions{})
		if err == nil && pvc.Spec.VolumeName == "" {
			return pvc, errUnbound // served, but not kept beyond NotFoundTTL
		}
		return pvc, err
	})
	if err != nil {
		return nil, err
	}
	return obj.(*corev1.PersistentVolumeClaim), nil
}

// StorageClass implements ClusterView.
func (v *KubeView) StorageClass(ctx context.Context, name string) (*storagev1.StorageClass, error) {
	obj, err := v.get(ctx, "StorageClass", "", name, func(ctx context.Context) (runtime.Object, error) {
		return v.client.StorageV1().StorageClasses().Get(ctx, name, metav1.GetOptions{})
	})
	if err != nil {
		return nil, err
	}
	return obj.(*storagev1.StorageClass), nil
}

// CSIDriver implements ClusterView.
func (v *KubeView) CSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error) {
	obj, err := v.get(ctx, "CSIDriver", "", name, func(ctx context.Context) (runtime.Object, error) {
		return v.client.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
	})
	if err != nil {
		return nil, err
	}
	return obj.(*storagev1.CSIDriver), nil
}

// VolumeAttachment implements ClusterView.
func (v *KubeView) VolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error) {
	obj, err := v.get(ctx, "VolumeAttachment", "", name, func(ctx context.Context) (runtime.Object, error) {
		return v.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
	})
	if err != nil {
		return nil, err
	}
	return obj.(*storagev1.VolumeAttachment), nil
}

// Secret implements ClusterView: always live, never kept.
func (v *KubeView) Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error) {
	return v.client.CoreV1().Secrets(namespace).Get(ctx, name, metav1.GetOptions{})
}

// Forget implements ClusterView. The next read is live; the forgotten copy is kept only as the
// fallback served while the API server cannot be reached (see get), never as an answer.
func (v *KubeView) Forget(kind, namespace, name string) {
	key := viewKey(kind, namespace, name)
	v.mu.Lock()
	if e, ok := v.entries[key]; ok {
		if e.obj == nil {
			delete(v.entries, key)
		} else {
			e.expires = time.Time{}
			v.entries[key] = e
		}
	}
	v.mu.Unlock()
}

// StaleServed is how many reads were answered from an expired copy because the API server
// could not be read.
func (v *KubeView) StaleServed() int64 { return v.staleServed.Load() }

// errUnbound marks a read whose object is served but kept only for NotFoundTTL (a claim that
// is not bound yet will be soon).
var errUnbound = errors.New("unbound claim")

func viewKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

func (v *KubeView) get(ctx context.Context, kind, namespace, name string, read func(context.Context) (runtime.Object, error)) (runtime.Object, error) {
	key := viewKey(kind, namespace, name)
	v.mu.Lock()
	e, cached := v.entries[key]
	if cached && v.clock.Now().Before(e.expires) {
		v.mu.Unlock()
		return e.obj, e.err
	}
	v.mu.Unlock()
	// Concurrent misses of one key (every pod of a StatefulSet naming one class, two rescues
	// asking for one PV) share one request.
	res, err, _ := v.reads.Do(key, func() (any, error) {
		obj, err := read(ctx)
		now := v.clock.Now()
		switch {
		case errors.Is(err, errUnbound):
			if _, serr := StripManagedFields(obj); serr != nil {
				return nil, serr
			}
			v.store(key, viewEntry{obj: obj, expires: now.Add(v.opts.NotFoundTTL)})
			return obj, nil
		case err == nil:
			if _, serr := StripManagedFields(obj); serr != nil {
				return nil, serr
			}
			v.store(key, viewEntry{obj: obj, expires: now.Add(v.opts.TTL)})
			return obj, nil
		case apierrors.IsNotFound(err):
			v.store(key, viewEntry{err: err, expires: now.Add(v.opts.NotFoundTTL)})
			return nil, err
		default:
			return nil, fmt.Errorf("read %s %s: %w", kind, name, err)
		}
	})
	if err != nil && cached && e.obj != nil && !apierrors.IsNotFound(err) {
		// The API server is away or failing: the last copy read is a better answer than none
		// (what the rescues read of these objects does not change), so they keep serving what
		// they hold. It is not stored again: the next read tries the API server first. A
		// NotFound is never served from memory this way, so nothing is retired on an outage.
		v.staleServed.Add(1)
		return e.obj, nil
	}
	if err != nil {
		return nil, err
	}
	return res.(runtime.Object), nil
}

func (v *KubeView) store(key string, e viewEntry) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.seq++
	e.seq = v.seq
	v.order = append(v.order, orderKey{key: key, seq: e.seq})
	v.entries[key] = e
	for len(v.entries) > v.opts.MaxEntries && len(v.order) > 0 {
		oldest := v.order[0]
		v.order = v.order[1:]
		if cur, ok := v.entries[oldest.key]; ok && cur.seq == oldest.seq { // not a stale position
			delete(v.entries, oldest.key)
		}
	}
	if len(v.order) > 2*v.opts.MaxEntries { // drop positions of keys stored again or forgotten
		kept := v.order[:0]
		for _, k := range v.order {
			if cur, ok := v.entries[k.key]; ok && cur.seq == k.seq {
				kept = append(kept, k)
			}
		}
		v.order = kept
	}
}
