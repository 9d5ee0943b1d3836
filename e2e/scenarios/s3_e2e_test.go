//go:build e2e

package scenarios

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

const (
	s3NS     = "e2e-s3"
	s3Bucket = "e2e-bucket"
	s3PV     = "e2e-s3-pv"
	s3Class  = "e2e-s3"
)

// s3Objects creates, in ns, the credentials Secret, the S3 StorageClass (once), a static PV on the
// bucket and a PVC "data" bound to it.
func s3Objects(t *testing.T, e *env, ns, pvName string) {
	t.Helper()
	ctx := context.Background()
	cs := e.c.Client
	keys := config.Default().S3
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3-creds"},
		StringData: map[string]string{
			keys.SecretKeys.AccessKeyID: e.s3.AccessKey, keys.SecretKeys.SecretAccessKey: e.s3.SecretKey, keys.SecretKeys.Endpoint: e.s3.Endpoint,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	bind := storagev1.VolumeBindingImmediate
	retain := corev1.PersistentVolumeReclaimRetain
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: s3Class},
		Provisioner:       e.csi.Opts.Driver,
		ReclaimPolicy:     &retain,
		VolumeBindingMode: &bind,
	}, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create storageclass: %v", err)
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: retain,
			StorageClassName:              s3Class,
			ClaimRef:                      &corev1.ObjectReference{Namespace: ns, Name: "data"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver:               e.csi.Opts.Driver,
				VolumeHandle:         s3Bucket,
				VolumeAttributes:     map[string]string{keys.Parameters.Bucket: s3Bucket, keys.Parameters.Endpoint: e.s3.Endpoint, "mounter": "s3fs"},
				NodePublishSecretRef: &corev1.SecretReference{Name: "s3-creds", Namespace: ns},
			}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pv: %v", err)
	}
	class := s3Class
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &class,
			VolumeName:       pvName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pvc: %v", err)
	}
	waitFor(t, time.Minute, "PVC "+ns+"/data to be Bound", func() (bool, string) {
		pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pvc.Status.Phase == corev1.ClaimBound, string(pvc.Status.Phase)
	})
}

func s3Pod(name, image string) *corev1.Pod {
	none := corev1.MountPropagationNone
	loop := []string{"sh", "-c", "while true; do sleep 1; done"}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{
				// No propagation set: the webhook gives this mount HostToContainer.
				{Name: "follower", Image: image, Command: loop, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}},
				// The user chose None: the webhook leaves it; the agent puts the restored mount into the running container.
				{Name: "pinned", Image: image, Command: loop, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", MountPropagation: &none}}},
			},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
			}}},
		},
	}
}

func lostFUSEMount(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	framework.Namespace(t, cs, s3NS, map[string]string{contract.LabelInject: contract.LabelInjectEnabled})
	dir, err := e.s3.Bucket(s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello from the bucket\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s3Objects(t, e, s3NS, s3PV)

	if _, err := cs.CoreV1().Pods(s3NS).Create(ctx, s3Pod("s3app", e.c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	pod := framework.WaitPod(t, cs, s3NS, "s3app", 2*time.Minute, "Running", framework.Running)
	if pod.Annotations[contract.AnnotationStatus] == "" {
		t.Fatalf("the webhook did not mutate the pod (no %s annotation): %v", contract.AnnotationStatus, pod.Annotations)
	}
	for _, c := range pod.Spec.Containers {
		prop := "<unset>"
		for _, m := range c.VolumeMounts {
			if m.Name == "data" && m.MountPropagation != nil {
				prop = string(*m.MountPropagation)
			}
		}
		want := map[string]string{"follower": string(corev1.MountPropagationHostToContainer), "pinned": string(corev1.MountPropagationNone)}[c.Name]
		if prop != want {
			t.Errorf("container %s: mountPropagation %s, want %s", c.Name, prop, want)
		}
		if c.LivenessProbe == nil {
			t.Errorf("container %s: no livenessProbe injected", c.Name)
		}
	}
	for _, c := range []string{"follower", "pinned"} {
		if out, err := execIn(e, s3NS, "s3app", c, "cat", "/data/hello.txt"); err != nil || out != "hello from the bucket\n" {
			t.Fatalf("%s cannot read the bucket before the failure: %q %v", c, out, err)
		}
	}
	restarts := restartCounts(pod)
	target := filepath.Join(e.c.Opts.KubeletDir, "pods", string(pod.UID), "volumes", "kubernetes.io~csi", s3PV, "mount")

	t.Logf("pods before the failure:\n%s", framework.PodTable(cs, s3NS))
	t.Logf("mounts at the pod's volume before the failure:\n%s", framework.MountTable(target))
	t.Logf("restarting the CSI plugin: its s3fs dies, %s goes dead", target)
	t0 := time.Now()
	if err := e.csi.Kill(); err != nil {
		t.Fatalf("kill the CSI plugin: %v", err)
	}
	_, statErr := os.Stat(target)
	sawDead := errors.Is(statErr, syscall.ENOTCONN) || errors.Is(statErr, syscall.ECONNABORTED)
	t.Logf("stat of the target right after the kill: %v", statErr)
	if err := e.csi.Start(ctx); err != nil {
		t.Fatalf("start the CSI plugin again: %v", err)
	}

	var followerAt, pinnedAt time.Duration
	waitFor(t, 90*time.Second, "container follower (HostToContainer) to read the bucket again", func() (bool, string) {
		out, err := execIn(e, s3NS, "s3app", "follower", "cat", "/data/hello.txt")
		if err != nil || out != "hello from the bucket\n" {
			return false, fmt.Sprintf("%q %v", out, err)
		}
		followerAt = time.Since(t0)
		return true, ""
	})
	// The agent puts the restored mount into the running container itself (containermount,
	// hostPID): pinned reads again WITHOUT a restart, although its propagation is None.
	waitFor(t, 90*time.Second, "container pinned (mountPropagation None) to read the bucket again without a restart", func() (bool, string) {
		out, err := execIn(e, s3NS, "s3app", "pinned", "cat", "/data/hello.txt")
		if err != nil || out != "hello from the bucket\n" {
			return false, fmt.Sprintf("%q %v", out, err)
		}
		pinnedAt = time.Since(t0)
		return true, ""
	})
	p, err := cs.CoreV1().Pods(s3NS).Get(ctx, "s3app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"follower", "pinned"} {
		if got := restartCounts(p)[c]; got != restarts[c] {
			t.Errorf("%s was restarted (%d → %d): the restored mount should have reached it without a restart", c, restarts[c], got)
		}
	}
	mi, _ := os.ReadFile("/proc/self/mountinfo")
	stacked := strings.Count(string(mi), " "+target+" ")
	if !sawDead && stacked < 2 {
		t.Errorf("no evidence the mount died: stat after the kill gave %v and %d mount(s) sit at the target", statErr, stacked)
	}
	t.Logf("pods after the repair:\n%s", framework.PodTable(cs, s3NS))
	t.Logf("mounts at the pod's volume after the repair (the dead s3fs mount, the agent's bind on top):\n%s", framework.MountTable(target))
	t.Logf("RESULT lost FUSE mount: follower (HostToContainer) reads again %s after the plugin restart, pinned (None) %s after, neither restarted (restarts %v → %v); %d mounts stacked at the target",
		followerAt.Round(100*time.Millisecond), pinnedAt.Round(100*time.Millisecond), restarts, restartCounts(p), stacked)

	for _, c := range []string{"follower", "pinned"} {
		if _, err := execIn(e, s3NS, "s3app", c, "sh", "-c", "echo written-after-by-"+c+" > /data/after-"+c+".txt"); err != nil {
			t.Errorf("%s cannot write after the repair: %v", c, err)
		}
	}
	waitFor(t, 30*time.Second, "data written after the repair to be in the bucket", func() (bool, string) {
		for _, c := range []string{"follower", "pinned"} {
			b, err := os.ReadFile(filepath.Join(dir, "after-"+c+".txt"))
			if err != nil || string(b) != "written-after-by-"+c+"\n" {
				return false, fmt.Sprintf("%s: %q %v", c, b, err)
			}
		}
		return true, ""
	})
}
