package webhook

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pvrescue/pvrescue/internal/config"
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

// Lookup reads the objects classification needs. Implementations: ReaderLookup (informer cache with
// a live fallback) and StaticLookup (fixed objects, for tests and benchmarks). The objects returned
// may be shared with the cache: callers only read them (classification does).
type Lookup interface {
	PVC(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error)
	StorageClass(ctx context.Context, name string) (*storagev1.StorageClass, error)
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
		return c.classifyClaim(ctx, claim, storageClassOf(pvc), pvc.Spec.VolumeMode)
	case v.Ephemeral != nil:
		if v.Ephemeral.VolumeClaimTemplate == nil {
			return VolumeClass{Kind: KindOther}, nil
		}
		spec := v.Ephemeral.VolumeClaimTemplate.Spec
		sc := ""
		if spec.StorageClassName != nil {
			sc = *spec.StorageClassName
		}
		return c.classifyClaim(ctx, EphemeralClaimName(podName, v.Name), sc, spec.VolumeMode)
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

// ClassifyClaim is the pure decision for a claim of StorageClass class with that provisioner.
func ClassifyClaim(cfg *config.Config, claim, class, provisioner string, mode *corev1.PersistentVolumeMode) VolumeClass {
	switch {
	case cfg.IsLocalClass(class):
		if mode != nil && *mode == corev1.PersistentVolumeBlock {
			return VolumeClass{Kind: KindLocalBlock, Claim: claim, Source: "storageclass " + class}
		}
		return VolumeClass{Kind: KindLocalFilesystem, Claim: claim, Source: "storageclass " + class}
	case provisioner != "" && cfg.IsS3Driver(provisioner):
		return VolumeClass{Kind: KindS3, Claim: claim, Source: "storageclass " + class + " provisioner " + provisioner}
	}
	return VolumeClass{Kind: KindOther, Claim: claim}
}

// ClassifyCSI is the pure decision for an inline CSI volume.
func ClassifyCSI(cfg *config.Config, driver string) VolumeClass {
	if cfg.IsS3Driver(driver) {
		return VolumeClass{Kind: KindS3, Source: "csi driver " + driver}
	}
	return VolumeClass{Kind: KindOther}
}

// EphemeralClaimName is the PVC name Kubernetes gives a generic ephemeral volume. Pods created
// through generateName have no name yet at admission, so the volume name stands in.
func EphemeralClaimName(podName, volume string) string {
	if podName == "" {
		return volume
	}
	return podName + "-" + volume
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
}

// PVC implements Lookup.
func (r ReaderLookup) PVC(ctx context.Context, namespace, name string) (*corev1.PersistentVolumeClaim, error) {
	pvc := &corev1.PersistentVolumeClaim{}
	if err := r.get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pvc); err != nil {
		return nil, err
	}
	return pvc, nil
}

// StorageClass implements Lookup.
func (r ReaderLookup) StorageClass(ctx context.Context, name string) (*storagev1.StorageClass, error) {
	sc := &storagev1.StorageClass{}
	if err := r.get(ctx, client.ObjectKey{Name: name}, sc); err != nil {
		return nil, err
	}
	return sc, nil
}

func (r ReaderLookup) get(ctx context.Context, key client.ObjectKey, obj client.Object) error {
	// Classification only reads the object: skip the cache's deep copy (most of a lookup's cost).
	err := r.Cache.Get(ctx, key, obj, client.UnsafeDisableDeepCopy)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) || r.Live == nil {
		return notFound(err)
	}
	return notFound(r.Live.Get(ctx, key, obj))
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
}

// NewStaticLookup indexes the given PVCs and StorageClasses.
func NewStaticLookup(objs ...client.Object) *StaticLookup {
	s := &StaticLookup{PVCs: map[string]*corev1.PersistentVolumeClaim{}, StorageClasses: map[string]*storagev1.StorageClass{}}
	for _, o := range objs {
		switch o := o.(type) {
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
	if p, ok := s.PVCs[namespace+"/"+name]; ok {
		return p, nil
	}
	return nil, ErrNotFound
}

// StorageClass implements Lookup.
func (s *StaticLookup) StorageClass(_ context.Context, name string) (*storagev1.StorageClass, error) {
	if sc, ok := s.StorageClasses[name]; ok {
		return sc, nil
	}
	return nil, ErrNotFound
}
