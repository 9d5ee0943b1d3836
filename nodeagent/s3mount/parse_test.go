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

// Only the PV's own driver classifies it: a claim's provisioner annotation, which whoever made
// the claim wrote, never does.
func TestS3Driver(t *testing.T) {
	cfg := config.Default()
	csiPV := func(driver string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: "b", VolumeAttributes: map[string]string{"mounter": "s3fs"}}}}}
	}
	for _, tc := range []struct {
		name   string
		pv     *corev1.PersistentVolume
		want   string
		wantOK bool
	}{
		{"configured driver", csiPV("ru.yandex.s3.csi"), "ru.yandex.s3.csi", true},
		{"another configured driver", csiPV("csi-s3"), "csi-s3", true},
		{"unknown driver", csiPV("other.csi"), "", false},
		{"not CSI", &corev1.PersistentVolume{}, "", false},
		{"nil", nil, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := S3Driver(cfg, tc.pv)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("S3Driver = %q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
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
