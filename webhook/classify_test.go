package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func pvcObj(name, class string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
	p := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"}}
	if class != "" {
		p.Spec.StorageClassName = ptr.To(class)
	}
	if mode != "" {
		p.Spec.VolumeMode = ptr.To(mode)
	}
	return p
}

func scObj(name, provisioner string) *storagev1.StorageClass {
	return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner}
}

func claimVol(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

func TestClassify(t *testing.T) {
	block, fs := corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem
	legacy := pvcObj("legacy", "", fs)
	legacy.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: "s3"}
	lookup := NewStaticLookup(
		pvcObj("blk", "local-ssd", block), pvcObj("fs", "local-ssd", fs), pvcObj("nomode", "local-ssd", ""),
		pvcObj("bucket", "s3", fs), pvcObj("ebs", "gp3", block), pvcObj("noclass", "", block),
		pvcObj("lostclass", "gone", fs), legacy,
		scObj("s3", "ru.yandex.s3.csi"), scObj("gp3", "ebs.csi.aws.com"),
	)
	cfg := testConfig()
	c := &Classifier{Config: cfg, Lookup: lookup}

	tests := []struct {
		name    string
		vol     corev1.Volume
		want    *VolumeClass // nil: not of interest
		skipped bool
	}{
		{"local block", claimVol("v", "blk"), &VolumeClass{Kind: KindLocalBlock, Claim: "blk", Source: "storageclass local-ssd"}, false},
		{"local filesystem", claimVol("v", "fs"), &VolumeClass{Kind: KindLocalFilesystem, Claim: "fs", Source: "storageclass local-ssd"}, false},
		{"local without volumeMode is Filesystem", claimVol("v", "nomode"), &VolumeClass{Kind: KindLocalFilesystem, Claim: "nomode", Source: "storageclass local-ssd"}, false},
		{"s3 provisioner", claimVol("v", "bucket"), &VolumeClass{Kind: KindS3, Claim: "bucket", Source: "storageclass s3 provisioner ru.yandex.s3.csi"}, false},
		{"legacy class annotation", claimVol("v", "legacy"), &VolumeClass{Kind: KindS3, Claim: "legacy", Source: "storageclass s3 provisioner ru.yandex.s3.csi"}, false},
		{"other provisioner", claimVol("v", "ebs"), nil, false},
		{"no class", claimVol("v", "noclass"), nil, false},
		{"missing pvc", claimVol("v", "nope"), nil, true},
		{"missing storageclass", claimVol("v", "lostclass"), nil, true},
		{"inline s3 csi", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "ch.ctrox.csi.s3-driver"}}},
			&VolumeClass{Kind: KindS3, Source: "csi driver ch.ctrox.csi.s3-driver"}, false},
		{"inline other csi", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "secrets-store.csi.k8s.io"}}}, nil, false},
		{"ephemeral local block", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("local-ssd"), VolumeMode: &block}}}}},
			&VolumeClass{Kind: KindLocalBlock, Claim: "pod-v", Source: "storageclass local-ssd"}, false},
		{"ephemeral s3", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
			VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To("s3")}}}}},
			&VolumeClass{Kind: KindS3, Claim: "pod-v", Source: "storageclass s3 provisioner ru.yandex.s3.csi"}, false},
		{"emptyDir", corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{tt.vol}}}
			got := c.Classify(context.Background(), "apps", pod)
			vc, ok := got.Volumes["v"]
			switch {
			case tt.want == nil && ok:
				t.Errorf("got %+v, want not of interest", vc)
			case tt.want != nil && !ok:
				t.Errorf("volume not classified (skipped: %+v), want %+v", got.Skipped, *tt.want)
			case tt.want != nil && vc != *tt.want:
				t.Errorf("got %+v, want %+v", vc, *tt.want)
			}
			if (len(got.Skipped) == 1) != tt.skipped {
				t.Errorf("skipped = %+v, want skipped=%v", got.Skipped, tt.skipped)
			}
		})
	}
}

// countingReader serves objects from a map and counts Get calls.
type countingReader struct {
	objs  map[client.ObjectKey]client.Object
	calls int
	err   error
}

func (r *countingReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.calls++
	if r.err != nil {
		return r.err
	}
	o, ok := r.objs[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "persistentvolumeclaims"}, key.Name)
	}
	switch dst := obj.(type) {
	case *corev1.PersistentVolumeClaim:
		*dst = *o.(*corev1.PersistentVolumeClaim)
	case *storagev1.StorageClass:
		*dst = *o.(*storagev1.StorageClass)
	case *corev1.PersistentVolume:
		*dst = *o.(*corev1.PersistentVolume)
	}
	return nil
}

func (r *countingReader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not implemented")
}

func TestReaderLookup(t *testing.T) {
	key := client.ObjectKey{Namespace: "apps", Name: "data"}
	pvc := pvcObj("data", "local-ssd", corev1.PersistentVolumeBlock)

	t.Run("cache hit: no live read", func(t *testing.T) {
		cache := &countingReader{objs: map[client.ObjectKey]client.Object{key: pvc}}
		live := &countingReader{}
		got, err := ReaderLookup{Cache: cache, Live: live}.PVC(context.Background(), "apps", "data")
		if err != nil || got.Name != "data" {
			t.Fatalf("got %v, %v", got, err)
		}
		if live.calls != 0 {
			t.Errorf("live reads = %d, want 0", live.calls)
		}
	})
	t.Run("cache miss: one live read", func(t *testing.T) {
		cache := &countingReader{}
		live := &countingReader{objs: map[client.ObjectKey]client.Object{key: pvc}}
		got, err := ReaderLookup{Cache: cache, Live: live}.PVC(context.Background(), "apps", "data")
		if err != nil || got.Name != "data" {
			t.Fatalf("got %v, %v", got, err)
		}
		if live.calls != 1 {
			t.Errorf("live reads = %d, want 1", live.calls)
		}
	})
	t.Run("missing everywhere: ErrNotFound", func(t *testing.T) {
		live := &countingReader{}
		_, err := ReaderLookup{Cache: &countingReader{}, Live: live}.StorageClass(context.Background(), "gone")
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("err = %v, want ErrNotFound", err)
		}
		if live.calls != 1 {
			t.Errorf("live reads = %d, want 1", live.calls)
		}
	})
	t.Run("cache error other than not found: no live read, error kept", func(t *testing.T) {
		boom := errors.New("cache not synced")
		live := &countingReader{}
		_, err := ReaderLookup{Cache: &countingReader{err: boom}, Live: live}.PVC(context.Background(), "apps", "data")
		if !errors.Is(err, boom) {
			t.Errorf("err = %v, want %v", err, boom)
		}
		if live.calls != 0 {
			t.Errorf("live reads = %d, want 0", live.calls)
		}
	})
}

func TestClassificationIs(t *testing.T) {
	c := Classification{Volumes: map[string]VolumeClass{"a": {Kind: KindS3}}}
	if !c.Is("a", KindS3) || c.Is("a", KindLocalBlock) || c.Is("b", KindS3) {
		t.Errorf("Is gave wrong answers for %+v", c)
	}
	if d := cmp.Diff(VolumeClass{Kind: KindOther}, ClassifyCSI(testConfig(), "x")); d != "" {
		t.Error(d)
	}
}

// With the informers' stores, a hit is the stored object itself (no copy, no cache or live
// read); a miss is one live read; a store error is kept.
func TestReaderLookupStores(t *testing.T) {
	pvc := pvcObj("data", "local-ssd", corev1.PersistentVolumeBlock)
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "s3"}, Provisioner: "ru.yandex.s3.csi"}
	stores := func() *InformerStores {
		pvcs, scs := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc), toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
		if err := pvcs.Add(pvc); err != nil {
			t.Fatal(err)
		}
		if err := scs.Add(sc); err != nil {
			t.Fatal(err)
		}
		return &InformerStores{PVCs: pvcs, StorageClasses: scs}
	}
	ctx := context.Background()

	t.Run("hit: the stored object, no reads", func(t *testing.T) {
		cache, live := &countingReader{}, &countingReader{}
		l := ReaderLookup{Cache: cache, Live: live, Stores: stores()}
		gotPVC, err := l.PVC(ctx, pvc.Namespace, pvc.Name)
		if err != nil || gotPVC != pvc {
			t.Errorf("PVC: got %p, %v; want the stored %p", gotPVC, err, pvc)
		}
		gotSC, err := l.StorageClass(ctx, "s3")
		if err != nil || gotSC != sc {
			t.Errorf("StorageClass: got %p, %v; want the stored %p", gotSC, err, sc)
		}
		if cache.calls+live.calls != 0 {
			t.Errorf("cache reads %d, live reads %d; want none", cache.calls, live.calls)
		}
	})
	t.Run("miss: one live read", func(t *testing.T) {
		other := pvcObj("other", "local-ssd", corev1.PersistentVolumeBlock)
		live := &countingReader{objs: map[client.ObjectKey]client.Object{client.ObjectKeyFromObject(other): other}}
		got, err := ReaderLookup{Cache: &countingReader{}, Live: live, Stores: stores()}.PVC(ctx, other.Namespace, other.Name)
		if err != nil || got.Name != "other" || live.calls != 1 {
			t.Errorf("got %v, %v after %d live reads; want other after 1", got, err, live.calls)
		}
		_, err = ReaderLookup{Cache: &countingReader{}, Live: live, Stores: stores()}.StorageClass(ctx, "gone")
		if !errors.Is(err, ErrNotFound) || live.calls != 2 {
			t.Errorf("missing class: %v after %d live reads; want ErrNotFound after 2", err, live.calls)
		}
		if _, err := (ReaderLookup{Stores: stores()}).PVC(ctx, "apps", "gone"); !errors.Is(err, ErrNotFound) {
			t.Errorf("no live reader: %v, want ErrNotFound", err)
		}
	})
	t.Run("store error kept, no live read", func(t *testing.T) {
		boom := errors.New("store broken")
		live := &countingReader{}
		_, err := ReaderLookup{Live: live, Stores: &InformerStores{PVCs: failingStore{boom}}}.PVC(ctx, "apps", "data")
		if !errors.Is(err, boom) || live.calls != 0 {
			t.Errorf("err %v after %d live reads; want %v after none", err, live.calls, boom)
		}
	})
}

type failingStore struct{ err error }

func (f failingStore) GetByKey(string) (any, bool, error) { return nil, false, f.err }

func boundPVC(name, class, pv string, uid types.UID, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
	p := pvcObj(name, class, mode)
	p.UID = uid
	p.Spec.VolumeName = pv
	p.Status.Phase = corev1.ClaimBound
	return p
}

func pvObj(name, class string, ref *corev1.PersistentVolumeClaim, src corev1.PersistentVolumeSource, mode corev1.PersistentVolumeMode) *corev1.PersistentVolume {
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{StorageClassName: class, PersistentVolumeSource: src, VolumeMode: ptr.To(mode)}}
	if ref != nil {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ref.Namespace, Name: ref.Name, UID: ref.UID}
	}
	return pv
}

func csiSource(driver string) corev1.PersistentVolumeSource {
	return corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: "h"}}
}

var localSource = corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: "/mnt/disks/a"}}

// A claim with a PV is classified by that PV alone, and only when the PV's claimRef names the
// claim (issue 32 item 5): no annotation or class of the claim makes another driver's PV S3.
func TestClassifyBoundClaims(t *testing.T) {
	block, fs := corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem
	s3Driver, other := "ru.yandex.s3.csi", "ebs.csi.aws.com"

	// The tenant's claim asks for the S3 class and says the S3 provisioner made it; its PV is EBS.
	liar := boundPVC("liar", "s3", "pv-liar", "uid-liar", fs)
	liar.Annotations = map[string]string{"volume.kubernetes.io/storage-provisioner": s3Driver, "volume.beta.kubernetes.io/storage-provisioner": s3Driver}
	// Bound (phase and volumeName) to a PV whose claimRef names another claim's UID.
	foreign := boundPVC("foreign", "s3", "pv-victim", "uid-foreign", fs)
	victim := boundPVC("foreign", "s3", "pv-victim", "uid-victim", fs) // same namespace/name, the former claim
	// A local-class claim bound to a PV that is not a local volume: no guard.
	notLocal := boundPVC("notlocal", "local-ssd", "pv-notlocal", "uid-notlocal", block)
	// A static S3 PV bound to a claim without class: S3 (the StorageClass path could not tell).
	static := boundPVC("static", "", "pv-static", "uid-static", fs)
	blk := boundPVC("blk", "local-ssd", "pv-blk", "uid-blk", block)
	// A local-class claim in Block mode... on a Filesystem local PV: the PV's mode counts.
	fsPV := boundPVC("fspv", "local-ssd", "pv-fspv", "uid-fspv", block)
	// Pending, no PV: WaitForFirstConsumer or provisioning; the admin's StorageClass decides.
	pending := pvcObj("pending", "s3", fs)
	pending.UID, pending.Status.Phase = "uid-pending", corev1.ClaimPending
	// Pending, bound in advance by name to a free S3 PV / to one reserved for another claim.
	prebound := pvcObj("prebound", "", fs)
	prebound.UID, prebound.Spec.VolumeName, prebound.Status.Phase = "uid-prebound", "pv-free", corev1.ClaimPending
	preTaken := pvcObj("pretaken", "", fs)
	preTaken.UID, preTaken.Spec.VolumeName, preTaken.Status.Phase = "uid-pretaken", "pv-liar", corev1.ClaimPending
	noPV := boundPVC("nopv", "s3", "pv-gone", "uid-nopv", fs)

	lookup := NewStaticLookup(liar, foreign, notLocal, static, blk, fsPV, pending, prebound, preTaken, noPV,
		scObj("s3", s3Driver), scObj("gp3", other),
		pvObj("pv-liar", "s3", liar, csiSource(other), fs),
		pvObj("pv-victim", "s3", victim, csiSource(s3Driver), fs),
		pvObj("pv-notlocal", "local-ssd", notLocal, csiSource(other), block),
		pvObj("pv-static", "", static, csiSource(s3Driver), fs),
		pvObj("pv-blk", "local-ssd", blk, localSource, block),
		pvObj("pv-fspv", "local-ssd", fsPV, localSource, fs),
		pvObj("pv-free", "", nil, csiSource(s3Driver), fs),
	)
	c := &Classifier{Config: testConfig(), Lookup: lookup}
	tests := []struct {
		name    string
		claim   string
		want    *VolumeClass // nil: not of interest
		skipped bool
	}{
		{"s3 provisioner annotation and class over another driver's PV", "liar", nil, false},
		{"PV's claimRef names another uid", "foreign", nil, true},
		{"local class over a non-local PV", "notlocal", nil, false},
		{"static S3 PV without class", "static", &VolumeClass{Kind: KindS3, Claim: "static", Source: "persistentvolume pv-static csi driver " + s3Driver}, false},
		{"local block PV", "blk", &VolumeClass{Kind: KindLocalBlock, Claim: "blk", Source: "persistentvolume pv-blk storageclass local-ssd"}, false},
		{"local PV's own volumeMode", "fspv", &VolumeClass{Kind: KindLocalFilesystem, Claim: "fspv", Source: "persistentvolume pv-fspv storageclass local-ssd"}, false},
		{"pending with an S3 StorageClass", "pending", &VolumeClass{Kind: KindS3, Claim: "pending", Source: "storageclass s3 provisioner " + s3Driver}, false},
		{"pending, bound in advance to a free S3 PV", "prebound", &VolumeClass{Kind: KindS3, Claim: "prebound", Source: "persistentvolume pv-free csi driver " + s3Driver}, false},
		{"pending, bound in advance to another claim's PV", "pretaken", nil, true},
		{"bound, PV missing", "nopv", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{claimVol("v", tt.claim)}}}
			got := c.Classify(context.Background(), "apps", pod)
			vc, ok := got.Volumes["v"]
			switch {
			case tt.want == nil && ok:
				t.Errorf("got %+v, want not of interest", vc)
			case tt.want != nil && !ok:
				t.Errorf("volume not classified (skipped: %+v), want %+v", got.Skipped, *tt.want)
			case tt.want != nil && vc != *tt.want:
				t.Errorf("got %+v, want %+v", vc, *tt.want)
			}
			if (len(got.Skipped) == 1) != tt.skipped {
				t.Errorf("skipped = %+v, want skipped=%v", got.Skipped, tt.skipped)
			}
		})
	}
}

// A cached PV that does not name its claim is read again past the cache: the PV informer may
// lag the PVC's (static binding: the cached PV still has no claimRef). What the API server
// holds decides, both ways.
func TestClaimedPVRereadsAStaleCache(t *testing.T) {
	fs := corev1.PersistentVolumeFilesystem
	pvc := boundPVC("data", "", "pv-data", "uid-data", fs)
	ctx := context.Background()
	stale := pvObj("pv-data", "", nil, csiSource("ru.yandex.s3.csi"), fs)
	fresh := pvObj("pv-data", "", pvc, csiSource("ru.yandex.s3.csi"), fs)
	other := pvObj("pv-data", "", boundPVC("data", "", "pv-data", "uid-before", fs), csiSource("ru.yandex.s3.csi"), fs)

	l := NewStaticLookup(pvc, stale)
	l.LivePVs = map[string]*corev1.PersistentVolume{"pv-data": fresh}
	c := &Classifier{Config: testConfig(), Lookup: l}
	if got, err := c.claimedPV(ctx, pvc); err != nil || got != fresh {
		t.Errorf("stale cache, fresh PV names the claim: got %v, %v; want the live PV", got, err)
	}
	l.LivePVs["pv-data"] = other
	_, err := c.claimedPV(ctx, pvc)
	if !errors.Is(err, ErrForeignPV) {
		t.Errorf("live PV names uid-before: err = %v, want ErrForeignPV", err)
	}
	// The error goes back to the requester: it must not say whose claim the PV is bound to.
	if err != nil && strings.Contains(err.Error(), "uid-before") {
		t.Errorf("the error names the other claim's uid: %v", err)
	}
	// Through ReaderLookup: a store hit that does not fit goes to Live once.
	pvs := toolscache.NewStore(toolscache.MetaNamespaceKeyFunc)
	if err := pvs.Add(stale); err != nil {
		t.Fatal(err)
	}
	live := &countingReader{objs: map[client.ObjectKey]client.Object{{Name: "pv-data"}: fresh}}
	c.Lookup = ReaderLookup{Live: live, Stores: &InformerStores{PVs: pvs}}
	got, err := c.claimedPV(ctx, pvc)
	if err != nil || got.Spec.ClaimRef == nil || got.Spec.ClaimRef.UID != "uid-data" {
		t.Errorf("ReaderLookup: got %v, %v; want the live PV naming uid-data", got, err)
	}
	if live.calls != 1 {
		t.Errorf("live reads = %d, want 1", live.calls)
	}
}
