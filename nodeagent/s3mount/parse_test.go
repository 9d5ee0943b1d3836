package s3mount

import (
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

func TestS3Driver(t *testing.T) {
	cfg := config.Default()
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: corev1.PersistentVolumeSpec{
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
			Driver: "ru.yandex.s3.csi", VolumeHandle: "b", VolumeAttributes: map[string]string{"mounter": "s3fs"}}}}}
	if _, ok := S3Driver(cfg, pv, nil); !ok {
		t.Error("configured driver not recognised")
	}
	pv.Spec.CSI.Driver = "other.csi"
	if _, ok := S3Driver(cfg, pv, nil); ok {
		t.Error("unknown driver recognised")
	}
	for _, key := range []string{"volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner"} {
		pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{key: "csi-s3"}}}
		if _, ok := S3Driver(cfg, pv, pvc); !ok {
			t.Errorf("provisioner annotation %s not used as fallback", key)
		}
	}
	if _, ok := S3Driver(cfg, &corev1.PersistentVolume{}, nil); ok {
		t.Error("non-CSI PV recognised")
	}
}

func TestReason(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("x: %w", csiclient.ErrSecretNotFound):         "SecretNotFound",
		fmt.Errorf("x: %w", s3fs.ErrSecretKeyMissing):            "SecretKeyMissing",
		fmt.Errorf("x: %w", s3fs.ErrUnsupported):                 "BadVolumeAttributes",
		fmt.Errorf("x: %w", s3fs.ErrS3fs):                        "S3fsFailed",
		fmt.Errorf("%w: %w", s3fs.ErrBadOptions, s3fs.ErrUnsafe): "UnsafeVolumeAttributes",
		errors.New("other"):                                      "Error",
	} {
		if got := Reason(err); got != want {
			t.Errorf("Reason(%v) = %q, want %q", err, got, want)
		}
	}
}
