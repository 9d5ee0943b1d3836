// Package workload holds the pods and admission requests the benchmarks send, shared by the
// load run (hack/bench) and the Go benchmarks (hack/bench/gobench).
package workload

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/pvrescue/pvrescue/internal/config"
)

// Namespace of every benchmark object.
const Namespace = "bench"

// Claims of FourPVCPod: two local block devices, one S3 bucket, one volume pvrescue ignores.
const (
	ClaimBlock0, ClaimBlock1, ClaimS3, ClaimOther = "data-0", "data-1", "bucket", "scratch"
)

// StorageClasses of the objects: a local block class, an S3 class, a class pvrescue ignores.
const (
	SCLocal = "local-ssd"
	SCS3    = "csi-s3"
	SCOther = "standard"
)

// Objects are the StorageClasses and PVCs FourPVCPod refers to, for the configuration pc.
func Objects(pc *config.Config) ([]client.Object, error) {
	if len(pc.LocalBlock.StorageClasses) == 0 || pc.LocalBlock.StorageClasses[0] != SCLocal || len(pc.S3.Drivers) == 0 {
		return nil, fmt.Errorf("configuration changed (local classes %v, S3 drivers %v): update the bench objects", pc.LocalBlock.StorageClasses, pc.S3.Drivers)
	}
	block, fs := corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem
	sc := func(name, prov string) *storagev1.StorageClass {
		return &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: prov}
	}
	pvc := func(name, class string, mode *corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				StorageClassName: &class, VolumeMode: mode,
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
	}
	objs := []client.Object{
		sc(SCLocal, "kubernetes.io/no-provisioner"), sc(SCS3, pc.S3.Drivers[0]), sc(SCOther, "example.com/other"),
		pvc(ClaimBlock0, SCLocal, &block), pvc(ClaimBlock1, SCLocal, &block), pvc(ClaimS3, SCS3, &fs), pvc(ClaimOther, SCOther, &fs),
	}
	for i := 0; i < HundredBlock; i++ {
		objs = append(objs, pvc(fmt.Sprintf("blk-%d", i), SCLocal, &block))
	}
	for i := 0; i < HundredS3; i++ {
		objs = append(objs, pvc(fmt.Sprintf("s3-%d", i), SCS3, &fs))
	}
	return objs, nil
}

// Volumes of HundredVolumePod: local block claims and S3 claims.
const HundredBlock, HundredS3 = 60, 40

// HundredVolumePod has 100 volumes: 60 local block claims mapped as devices across 3 containers
// (20 each) and 40 S3 claims mounted across the same containers, every container with an
// explicit command, so each gets the exec wrapper, the probe and propagation.
func HundredVolumePod() *corev1.Pod {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, GenerateName: "wide-", Labels: map[string]string{"app": "wide"}},
	}
	for c := 0; c < 3; c++ {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{
			Name: fmt.Sprintf("shard-%d", c), Image: "example.com/db:1", Command: []string{"/bin/db", "--shard", fmt.Sprint(c)},
		})
	}
	for i := 0; i < HundredBlock; i++ {
		name := fmt.Sprintf("blk-%d", i)
		p.Spec.Volumes = append(p.Spec.Volumes, claimVolume(name, name))
		c := &p.Spec.Containers[i%3]
		c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: name, DevicePath: "/dev/" + name})
	}
	for i := 0; i < HundredS3; i++ {
		name := fmt.Sprintf("s3-%d", i)
		p.Spec.Volumes = append(p.Spec.Volumes, claimVolume(name, name))
		c := &p.Spec.Containers[i%3]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: "/buckets/" + name})
	}
	return p
}

// ReviewRequest wraps pod in a CREATE admission request.
func ReviewRequest(pod *corev1.Pod) (*admissionv1.AdmissionRequest, error) {
	raw, err := json.Marshal(pod)
	if err != nil {
		return nil, err
	}
	return &admissionv1.AdmissionRequest{
		UID:       types.UID("3f0c2b1e-0000-4000-8000-000000000001"),
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Resource:  metav1.GroupVersionResource{Version: "v1", Resource: "pods"},
		Namespace: Namespace, Operation: admissionv1.Create,
		Object: runtime.RawExtension{Raw: raw},
	}, nil
}

func claimVolume(name, claim string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}
}

// FourPVCPod has two local block devices, one S3 mount and one volume of no interest.
func FourPVCPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, GenerateName: "db-", Labels: map[string]string{"app": "db"}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "db", Image: "example.com/db:1", Command: []string{"/bin/db", "--data=/dev/data0"},
				VolumeDevices: []corev1.VolumeDevice{{Name: "data-0", DevicePath: "/dev/data0"}, {Name: "data-1", DevicePath: "/dev/data1"}},
				VolumeMounts:  []corev1.VolumeMount{{Name: "bucket", MountPath: "/bucket"}, {Name: "scratch", MountPath: "/scratch"}},
			}},
			Volumes: []corev1.Volume{claimVolume("data-0", "data-0"), claimVolume("data-1", "data-1"), claimVolume("bucket", "bucket"), claimVolume("scratch", "scratch")},
		},
	}
}

// ManagedFieldsPod is a pod of about size bytes, most of it managedFields and annotations, as
// pods written by several controllers look; it mounts the S3 claim so pvrescue has work to do.
func ManagedFieldsPod(size int) *corev1.Pod {
	p := FourPVCPod()
	p.Name = "big"
	p.Annotations = map[string]string{}
	for i := 0; ; i++ {
		fields := fmt.Sprintf(`{"f:metadata":{"f:annotations":{"f:example.com/key-%d":{}},"f:labels":{"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"db\"}":{".":{},"f:env":{"k:{\"name\":\"VAR_%d\"}":{".":{},"f:name":{},"f:value":{}}},"f:image":{},"f:name":{}}}}}`, i, i)
		p.ManagedFields = append(p.ManagedFields, metav1.ManagedFieldsEntry{
			Manager: fmt.Sprintf("controller-%d", i), Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
			Time: &metav1.Time{Time: time.Unix(1764400000, 0)}, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields),
		})
		p.Annotations[fmt.Sprintf("example.com/key-%d", i)] = strings.Repeat("v", 64)
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: fmt.Sprintf("VAR_%d", i), Value: "value"})
		if b, _ := json.Marshal(p); len(b) >= size {
			return p
		}
	}
}

// ReviewBody is the JSON AdmissionReview the apiserver would POST for pod.
func ReviewBody(pod *corev1.Pod) ([]byte, error) {
	req, err := ReviewRequest(pod)
	if err != nil {
		return nil, err
	}
	return json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request:  req,
	})
}
