package s3mount

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
)

func TestTargetPath(t *testing.T) {
	tests := []struct{ kubelet, uid, pv, want string }{
		{"/var/lib/kubelet", "u1", "pv-a", "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-a/mount"},
		{"/k/", "u2", "ns/odd", "/k/pods/u2/volumes/kubernetes.io~csi/ns~odd/mount"},
	}
	for _, tt := range tests {
		got := TargetPath(tt.kubelet, tt.uid, tt.pv)
		if got != tt.want {
			t.Errorf("TargetPath(%q,%q,%q) = %q, want %q", tt.kubelet, tt.uid, tt.pv, got, tt.want)
		}
		uid, dir, ok := ParseTargetPath(tt.kubelet, got)
		if !ok || uid != tt.uid || dir != strings.ReplaceAll(tt.pv, "/", "~") {
			t.Errorf("ParseTargetPath(%q) = %q %q %v", got, uid, dir, ok)
		}
	}
	for _, p := range []string{
		"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-a",
		"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~nfs/pv-a/mount",
		"/elsewhere/pods/u1/volumes/kubernetes.io~csi/pv-a/mount",
		"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-a/mount/sub",
	} {
		if _, _, ok := ParseTargetPath("/var/lib/kubelet", p); ok {
			t.Errorf("ParseTargetPath accepted %q", p)
		}
	}
}

func TestVolData(t *testing.T) {
	good := `{"attachmentID":"","driverName":"ru.yandex.s3.csi","nodeName":"n1","specVolID":"pv-a","volumeHandle":"bkt/pv-a","volumeLifecycleMode":"Persistent"}`
	tests := []struct {
		name, data string
		wantErr    error
	}{
		{"match", good, nil},
		{"other PV", strings.Replace(good, `"specVolID":"pv-a"`, `"specVolID":"pv-b"`, 1), ErrVolData},
		{"other driver", strings.Replace(good, "ru.yandex.s3.csi", "other", 1), ErrVolData},
		{"other handle", strings.Replace(good, `"bkt/pv-a"`, `"bkt/x"`, 1), ErrVolData},
		{"only specVolID", `{"specVolID":"pv-a"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vd, err := ParseVolData([]byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if err := vd.Check("pv-a", "ru.yandex.s3.csi", "bkt/pv-a"); !errors.Is(err, tt.wantErr) {
				t.Errorf("Check = %v, want %v", err, tt.wantErr)
			}
		})
	}
	if _, err := ParseVolData([]byte("{")); err == nil {
		t.Error("bad JSON accepted")
	}
}

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
		fmt.Errorf("x: %w", s3fs.ErrSecretNotFound):              "SecretNotFound",
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
