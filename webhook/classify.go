package webhook

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/podclaim"
)

// Kind is what the webhook makes of one pod volume.
type Kind string

const (
	// KindOther is a volume pvrescue does nothing for.
	KindOther Kind = "other"
	// KindLocalBlock is a configured local class with volumeMode Block: it gets the guard.
	KindLocalBlock Kind = "local-block"
	// KindLocalFilesystem is a configured local class in Filesystem mode: no guard (nothing to fake).
	KindLocalFilesystem Kind = "local-filesystem"
	// KindS3 is an s3fs-backed volume: its mounts get the probe and HostToContainer propagation.
	KindS3 Kind = "s3"
)

// ErrNotFound is returned by a Lookup when the object exists neither in the cache nor live.
var ErrNotFound = errors.New("not found")

// ErrForeignPV is returned when the PersistentVolume a claim names does not exist or does not
// name that claim back (claimRef namespace, name and UID), in the cache nor live: the volume is
// not classified by it. Both get this one answer, word for word: a tenant's claim may name any
// PV, and a different answer would tell it which PV names exist.
var ErrForeignPV = errors.New("persistentvolume not found or not bound to this claim")

// Lookup reads the objects classification needs. Implementations: ReaderLookup (informer cache with
// a live fallback) and StaticLookup (fixed objects, for tests and benchmarks). The objects returned
// may be shared with the cache: callers only read them (classification does).
type Lookup interface {
	PVC(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
	StorageClass(ctx context.Context, name string) (*storagev1.StorageClass, error)
	// PV reads a PersistentVolume; fresh asks the API server past the cache (a cached PV that
	// does not name the claim bound to it: the PV informer may lag the PVC informer).
	PV(ctx context.Context, name string, fresh bool) (*corev1.PersistentVolume, error)
}

// VolumeClass is the classification of one pod volume.
type VolumeClass struct {
	Kind Kind
	// Claim names the PVC behind the volume (empty for inline CSI).
	Claim string
	// Source says where the decision came from, e.g. "storageclass local-ssd" or "csi driver x".
	Source string
}

// Classification of all volumes of one pod.
type Classification struct {
	// Volumes by pod volume name; volumes of no interest are absent.
	Volumes map[string]VolumeClass
	// Skipped volumes, in pod order.
	Skipped []Skip
}

// Is reports whether the named volume has kind k.
func (c Classification) Is(volume string, k Kind) bool {
	v, ok := c.Volumes[volume]
	return ok && v.Kind == k
}

// Classifier classifies pod volumes against the configuration.
type Classifier struct {
	Config *config.Config
	Lookup Lookup
}

// Classify looks at every volume of pod (in namespace ns). Lookup failures never fail the
// admission: the volume is skipped and reported, because failurePolicy is Ignore anyway and a
// partial injection is better than none.
func (c *Classifier) Classify(ctx context.Context, ns string, pod *corev1.Pod) Classification {
	out := Classification{Volumes: make(map[string]VolumeClass, len(pod.Spec.Volumes))}
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		vc, err := c.classifyVolume(ctx, ns, pod.Name, v)
		if err != nil {
			out.Skipped = append(out.Skipped, Skip{Volume: v.Name, Reason: err.Error()})
			continue
		}
		if vc.Kind != KindOther {
			out.Volumes[v.Name] = vc
		}
	}
	return out
}

func (c *Classifier) classifyVolume(ctx context.Context, ns, podName string, v *corev1.Volume) (VolumeClass, error) {
	switch {
	case v.PersistentVolumeClaim != nil:
		claim := v.PersistentVolumeClaim.ClaimName
		pvc, err := c.Lookup.PVC(ctx, ns, claim)
		if err != nil {
			return VolumeClass{}, fmt.Errorf("persistentvolumeclaim %s/%s: %w", ns, claim, err)
		}
		if pvc.Spec.VolumeName != "" {
			// Bound, or bound in advance by name: that PV alone decides (no provisioning follows).
			pv, err := c.claimedPV(ctx, pvc)
			if err != nil {
				return VolumeClass{}, fmt.Errorf("persistentvolumeclaim %s/%s: %w", ns, claim, err)
			}
			return ClassifyPV(c.Config, claim, pv), nil
		}
		// No PV yet (WaitForFirstConsumer, or provisioning): the admin's StorageClass decides.
		return c.classifyClaim(ctx, claim, storageClassOf(pvc), pvc.Spec.VolumeMode)
	case v.Ephemeral != nil:
		if v.Ephemeral.VolumeClaimTemplate == nil {
			return VolumeClass{Kind: KindOther}, nil
		}
		spec := v.Ephemeral.VolumeClaimTemplate.Spec
		return c.classifyClaim(ctx, podclaim.EphemeralName(podName, v.Name), ptr.Deref(spec.StorageClassName, ""), spec.VolumeMode)
	case v.CSI != nil:
		return ClassifyCSI(c.Config, v.CSI.Driver), nil
	}
	return VolumeClass{Kind: KindOther}, nil
}

func (c *Classifier) classifyClaim(ctx context.Context, claim, class string, mode *corev1.PersistentVolumeMode) (VolumeClass, error) {
	if class == "" {
		// No class (static binding or the cluster default applied later): nothing we can tell.
		return VolumeClass{Kind: KindOther, Claim: claim}, nil
	}
	if c.Config.IsLocalClass(class) {
		// Local classes are known by name; their StorageClass object need not exist yet.
		return ClassifyClaim(c.Config, claim, class, "", mode), nil
	}
	sc, err := c.Lookup.StorageClass(ctx, class)
	if err != nil {
		return VolumeClass{}, fmt.Errorf("storageclass %s of claim %s: %w", class, claim, err)
	}
	return ClassifyClaim(c.Config, claim, class, sc.Provisioner, mode), nil
}

// claimedPV returns the PV pvc names when that PV names pvc back (claimRefNames). A cached PV
// that does not is read once more from the API server before the claim is given up.
func (c *Classifier) claimedPV(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (*corev1.PersistentVolume, error) {
	name := pvc.Spec.VolumeName
	var pv *corev1.PersistentVolume
	for _, fresh := range []bool{false, true} {
		var err error
		if pv, err = c.Lookup.PV(ctx, name, fresh); errors.Is(err, ErrNotFound) {
			err = ErrForeignPV // as a foreign one
		}
		if err != nil {
			return nil, fmt.Errorf("persistentvolume %s: %w", name, err)
		}
		if claimRefNames(pv, pvc) {
			return pv, nil
		}
	}
	// The error reaches the requester (admission warning, status annotation): it must not
	// name whose claim the PV is bound to. The operator gets that from the webhook's log.
	logr.FromContextOrDiscard(ctx).Info("claim names a PersistentVolume bound to another claim",
		"claim", pvc.Namespace+"/"+pvc.Name, "claimUID", pvc.UID, "persistentVolume", name, "claimRef", refString(pv.Spec.ClaimRef))
	return nil, fmt.Errorf("persistentvolume %s: %w", name, ErrForeignPV)
}

// claimRefNames reports whether pv's claimRef names pvc. A Bound claim must be named exactly
// (namespace, name, UID), as kubelet checks before it mounts; a claim bound in advance by
// spec.volumeName (still Pending) fits a PV that is free or reserved for it, since that is the
// only PV it can bind to.
func claimRefNames(pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) bool {
	ref := pv.Spec.ClaimRef
	if pvc.Status.Phase == corev1.ClaimBound {
		return ref != nil && pvc.UID != "" && ref.UID == pvc.UID && ref.Namespace == pvc.Namespace && ref.Name == pvc.Name
	}
	return ref == nil || ref.Namespace == pvc.Namespace && ref.Name == pvc.Name && (ref.UID == "" || ref.UID == pvc.UID)
}

func refString(ref *corev1.ObjectReference) string {
	if ref == nil {
		return "none"
	}
	return fmt.Sprintf("%s/%s uid %q", ref.Namespace, ref.Name, ref.UID)
}

// ClassifyPV is the pure decision for a claim bound to pv, from the PV's own fields only (what
// the node agent acts on too): a local PV of a configured local class, by the PV's volumeMode;
// a CSI PV of a configured S3 driver. Nothing of the claim counts: its annotations (e.g.
// volume.kubernetes.io/storage-provisioner) are written by whoever made it.
func ClassifyPV(cfg *config.Config, claim string, pv *corev1.PersistentVolume) VolumeClass {
	switch {
	case pv.Spec.Local != nil && cfg.IsLocalClass(pv.Spec.StorageClassName):
		return VolumeClass{Kind: localKind(pv.Spec.VolumeMode), Claim: claim, Source: "persistentvolume " + pv.Name + " storageclass " + pv.Spec.StorageClassName}
	case pv.Spec.CSI != nil && cfg.IsS3Driver(pv.Spec.CSI.Driver):
		return VolumeClass{Kind: KindS3, Claim: claim, Source: "persistentvolume " + pv.Name + " csi driver " + pv.Spec.CSI.Driver}
	}
	return VolumeClass{Kind: KindOther, Claim: claim}
}

// ClassifyClaim is the pure decision for a claim of StorageClass class with that provisioner.
func ClassifyClaim(cfg *config.Config, claim, class, provisioner string, mode *corev1.PersistentVolumeMode) VolumeClass {
	switch {
	case cfg.IsLocalClass(class):
		return VolumeClass{Kind: localKind(mode), Claim: claim, Source: "storageclass " + class}
	case provisioner != "" && cfg.IsS3Driver(provisioner):
		return VolumeClass{Kind: KindS3, Claim: claim, Source: "storageclass " + class + " provisioner " + provisioner}
	}
	return VolumeClass{Kind: KindOther, Claim: claim}
}

func localKind(mode *corev1.PersistentVolumeMode) Kind {
	if mode != nil && *mode == corev1.PersistentVolumeBlock {
		return KindLocalBlock
	}
	return KindLocalFilesystem
}

// ClassifyCSI is the pure decision for an inline CSI volume.
func ClassifyCSI(cfg *config.Config, driver string) VolumeClass {
	if cfg.IsS3Driver(driver) {
		return VolumeClass{Kind: KindS3, Source: "csi driver " + driver}
	}
	return VolumeClass{Kind: KindOther}
}

// storageClassOf returns the class a PVC asks for (the spec field, else the legacy annotation).
func storageClassOf(pvc *corev1.PersistentVolumeClaim) string {
	if pvc.Spec.StorageClassName != nil {
		return *pvc.Spec.StorageClassName
	}
	return pvc.Annotations[corev1.BetaStorageClassAnnotation]
}

// ReaderLookup reads from an informer-backed cache and, on a cache miss, once from the API server
// (a PVC created just before its pod may not have reached the informer yet).
type ReaderLookup struct {
	Cache client.Reader
	Live  client.Reader
	// Stores, when set, are the cache's informer stores, read in place of Cache: the object in
	// the store itself, where a cache Get costs a scheme lookup and an object allocated and
	// copied per read (most of an admission's garbage after the pod).
	Stores *InformerStores
}

// Store is the read side of an informer's store (client-go's cache.Store).
type Store interface {
	GetByKey(key string) (item any, exists bool, err error)
}

// InformerStores are the stores of the PVC, StorageClass and PV informers.
type InformerStores struct {
	PVCs, StorageClasses, PVs Store
}

// StoresOf returns the stores behind informers' PVC, StorageClass and PV informers (which it
// registers, as GetInformer does), or an error when its informers do not expose one.
func StoresOf(ctx context.Context, informers ctrlcache.Informers) (*InformerStores, error) {
	var stores [3]Store
	for i, obj := range []client.Object{&corev1.PersistentVolumeClaim{}, &storagev1.StorageClass{}, &corev1.PersistentVolume{}} {
		inf, err := informers.GetInformer(ctx, obj, ctrlcache.BlockUntilSynced(false))
		if err != nil {
			return nil, fmt.Errorf("informer for %T: %w", obj, err)
		}
		withStore, ok := inf.(interface{ GetStore() toolscache.Store })
		if !ok {
			return nil, fmt.Errorf("informer for %T (%T) has no store", obj, inf)
		}
		stores[i] = withStore.GetStore()
	}
	return &InformerStores{PVCs: stores[0], StorageClasses: stores[1], PVs: stores[2]}, nil
}

// PVC implements Lookup.
func (r ReaderLookup) PVC(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	return read[corev1.PersistentVolumeClaim](ctx, r, r.stores().PVCs, client.ObjectKey{Namespace: namespace, Name: name})
}

// StorageClass implements Lookup.
func (r ReaderLookup) StorageClass(ctx context.Context, name string) (*storagev1.StorageClass, error) {
	return read[storagev1.StorageClass](ctx, r, r.stores().StorageClasses, client.ObjectKey{Name: name})
}

// PV implements Lookup.
func (r ReaderLookup) PV(ctx context.Context, name string, fresh bool) (*corev1.PersistentVolume, error) {
	if fresh {
		r = ReaderLookup{Live: r.Live} // past store and cache
	}
	return read[corev1.PersistentVolume](ctx, r, r.stores().PVs, client.ObjectKey{Name: name})
}

func (r ReaderLookup) stores() (s InformerStores) {
	if r.Stores != nil {
		s = *r.Stores
	}
	return s
}

// read reads key from store when there is one (its key is namespace/name, or name when
// cluster-scoped), else from the cache, and on a miss once from the API server.
func read[E any, T interface {
	*E
	client.Object
}](ctx context.Context, r ReaderLookup, store Store, key client.ObjectKey) (T, error) {
	switch {
	case store != nil:
		storeKey := key.Name
		if key.Namespace != "" {
			storeKey = key.Namespace + "/" + key.Name
		}
		item, exists, err := store.GetByKey(storeKey)
		if err != nil {
			return nil, err
		}
		if exists {
			obj, ok := item.(T)
			if !ok {
				return nil, fmt.Errorf("informer store holds %T for %s, want %T", item, storeKey, obj)
			}
			return obj, nil
		}
	case r.Cache != nil:
		// Classification only reads the object: skip the cache's deep copy (most of a lookup's cost).
		obj := T(new(E))
		if err := r.Cache.Get(ctx, key, obj, client.UnsafeDisableDeepCopy); !apierrors.IsNotFound(err) {
			if err != nil {
				return nil, err
			}
			return obj, nil
		}
	}
	if r.Live == nil {
		return nil, ErrNotFound
	}
	obj := T(new(E))
	if err := r.Live.Get(ctx, key, obj); err != nil {
		return nil, notFound(err)
	}
	return obj, nil
}

func notFound(err error) error {
	if apierrors.IsNotFound(err) {
		return ErrNotFound
	}
	return err
}

// StaticLookup serves fixed objects; it is the fake Lookup for tests and benchmarks.
type StaticLookup struct {
	PVCs           map[string]*corev1.PersistentVolumeClaim // key: namespace/name
	StorageClasses map[string]*storagev1.StorageClass
	PVs            map[string]*corev1.PersistentVolume
	// LivePVs, when set, answers PV reads with fresh (what the API server holds); PVs is then the
	// cache, which may be stale.
	LivePVs map[string]*corev1.PersistentVolume
}

// NewStaticLookup indexes the given PVCs, StorageClasses and PVs.
func NewStaticLookup(objs ...client.Object) *StaticLookup {
	s := &StaticLookup{PVCs: map[string]*corev1.PersistentVolumeClaim{}, StorageClasses: map[string]*storagev1.StorageClass{},
		PVs: map[string]*corev1.PersistentVolume{}}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.PersistentVolume:
			s.PVs[o.Name] = o
		case *corev1.PersistentVolumeClaim:
			s.PVCs[o.Namespace+"/"+o.Name] = o
		case *storagev1.StorageClass:
			s.StorageClasses[o.Name] = o
		}
	}
	return s
}

// PVC implements Lookup.
func (s *StaticLookup) PVC(_ context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	return find(s.PVCs, namespace+"/"+name)
}

// StorageClass implements Lookup.
func (s *StaticLookup) StorageClass(_ context.Context, name string) (*storagev1.StorageClass, error) {
	return find(s.StorageClasses, name)
}

// PV implements Lookup.
func (s *StaticLookup) PV(_ context.Context, name string, fresh bool) (*corev1.PersistentVolume, error) {
	if fresh && s.LivePVs != nil {
		return find(s.LivePVs, name)
	}
	return find(s.PVs, name)
}

func find[T any](m map[string]*T, key string) (*T, error) {
	if v, ok := m[key]; ok {
		return v, nil
	}
	return nil, ErrNotFound
}
