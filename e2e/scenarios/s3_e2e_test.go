//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
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
// bucket for the suite's direct-layout plugin and a PVC "data" bound to it.
func s3Objects(t testing.TB, e *env, ns, pvName string) {
	t.Helper()
	keys := config.Default().S3
	s3Volume(t, e, s3Vol{ns: ns, pv: pvName, driver: e.csi.Driver, handle: s3Bucket,
		attrs: map[string]string{keys.Parameters.Bucket: s3Bucket, keys.Parameters.Endpoint: e.s3.Endpoint, "mounter": "s3fs"}})
}

// s3Vol is a static S3 PV and its claim "data" in ns.
type s3Vol struct {
	ns, pv, driver, handle string
	attrs                  map[string]string
	// stageSecret sets nodeStageSecretRef too (drivers with STAGE_UNSTAGE mount at staging).
	stageSecret bool
}

// s3Volume creates the credentials Secret "s3-creds" in v.ns, the S3 StorageClass (once), the PV
// and a PVC "data" bound to it, and waits for the binding.
func s3Volume(t testing.TB, e *env, v s3Vol) {
	t.Helper()
	ctx := context.Background()
	cs := e.c.Client
	keys := config.Default().S3
	if _, err := cs.CoreV1().Secrets(v.ns).Create(ctx, &corev1.Secret{
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
		Provisioner:       e.csi.Driver,
		ReclaimPolicy:     &retain,
		VolumeBindingMode: &bind,
	}, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create storageclass: %v", err)
	}
	src := &corev1.CSIPersistentVolumeSource{
		Driver:               v.driver,
		VolumeHandle:         v.handle,
		VolumeAttributes:     v.attrs,
		NodePublishSecretRef: &corev1.SecretReference{Name: "s3-creds", Namespace: v.ns},
	}
	if v.stageSecret {
		src.NodeStageSecretRef = &corev1.SecretReference{Name: "s3-creds", Namespace: v.ns}
	}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: v.pv},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			PersistentVolumeReclaimPolicy: retain,
			StorageClassName:              s3Class,
			ClaimRef:                      &corev1.ObjectReference{Namespace: v.ns, Name: "data"},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: src},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pv: %v", err)
	}
	class := s3Class
	if _, err := cs.CoreV1().PersistentVolumeClaims(v.ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &class,
			VolumeName:       v.pv,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pvc: %v", err)
	}
	waitFor(t, time.Minute, "PVC "+v.ns+"/data to be Bound", func() (bool, string) {
		pvc, err := cs.CoreV1().PersistentVolumeClaims(v.ns).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return pvc.Status.Phase == corev1.ClaimBound, string(pvc.Status.Phase)
	})
}

// s3Pod is the S3 scenario's application: four containers on the PVC "data".
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
				// The bucket's directory "sub" only (seaweedfs-csi#271: a naive remount shows the root here).
				{Name: "sub", Image: image, Command: loop, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPath: "sub"}}},
				// Read-only: must stay read-only after the restore.
				{Name: "ro", Image: image, Command: loop, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", ReadOnly: true}}},
			},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
			}}},
		},
	}
}

// plainPod is an application that the webhook never saw (unlabelled namespace): no probe, no
// propagation set.
func plainPod(name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken:  ptr(false),
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{Name: "app", Image: image, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
			}}},
		},
	}
}

const (
	helloRoot = "hello from the bucket\n"
	helloSub  = "hello from sub, not the root\n"
	// s3PlainNS is not opted in: its pods are never mutated.
	s3PlainNS = "e2e-s3-plain"
	s3PlainPV = "e2e-s3-plain-pv"
)

// checkReadOnly fails unless a write in the container fails as on a read-only file system.
func checkReadOnly(t testing.TB, e *env, ns, pod, container, when string) {
	t.Helper()
	out, err := execIn(e, ns, pod, container, "sh", "-c", "echo x > /data/ro-probe-"+container)
	if err == nil {
		t.Errorf("%s: %s/%s wrote into its read-only mount (%q)", when, pod, container, out)
		return
	}
	if !strings.Contains(err.Error(), "Read-only file system") {
		t.Errorf("%s: %s/%s write failed, but not with EROFS: %v", when, pod, container, err)
		return
	}
	t.Logf("%s: write in %s/%s refused: Read-only file system", when, pod, container)
}

func lostFUSEMount(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	framework.Namespace(t, cs, s3NS, map[string]string{contract.LabelInject: contract.LabelInjectEnabled})
	dir, err := e.s3.Bucket(s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte(helloRoot), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub", "hello.txt"), []byte(helloSub), 0o644); err != nil {
		t.Fatal(err)
	}
	s3Objects(t, e, s3NS, s3PV)
	// The same bucket through a second PV, in a namespace the webhook ignores.
	fuseNamespace(t, e, s3PlainNS, false)
	keys := config.Default().S3
	s3Volume(t, e, s3Vol{ns: s3PlainNS, pv: s3PlainPV, driver: e.csi.Driver, handle: s3Bucket + "-plain",
		attrs: map[string]string{keys.Parameters.Bucket: s3Bucket, keys.Parameters.Endpoint: e.s3.Endpoint, "mounter": "s3fs"}})
	deletePVAtCleanup(t, e, s3PlainPV)

	if _, err := cs.CoreV1().Pods(s3NS).Create(ctx, s3Pod("s3app", e.c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	if _, err := cs.CoreV1().Pods(s3PlainNS).Create(ctx, plainPod("plain", e.c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	pod := framework.WaitPod(t, cs, s3NS, "s3app", 2*time.Minute, "Running", framework.Running)
	plain := framework.WaitPod(t, cs, s3PlainNS, "plain", 2*time.Minute, "Running", framework.Running)
	if pod.Annotations[contract.AnnotationStatus] == "" {
		t.Fatalf("the webhook did not mutate the pod (no %s annotation): %v", contract.AnnotationStatus, pod.Annotations)
	}
	if m := mutated(plain); len(m) > 0 {
		t.Fatalf("the pod in the unlabelled namespace was mutated: %v", m)
	}
	for _, c := range pod.Spec.Containers {
		prop := "<unset>"
		for _, m := range c.VolumeMounts {
			if m.Name == "data" && m.MountPropagation != nil {
				prop = string(*m.MountPropagation)
			}
		}
		t.Logf("container %s: mountPropagation %s", c.Name, prop)
		// Read-only mounts keep None: a mount propagated into them would arrive writable.
		if want, ok := map[string]string{"follower": string(corev1.MountPropagationHostToContainer), "pinned": string(corev1.MountPropagationNone),
			"ro": "<unset>"}[c.Name]; ok && prop != want {
			t.Errorf("container %s: mountPropagation %s, want %s", c.Name, prop, want)
		}
		if c.LivenessProbe == nil {
			t.Errorf("container %s: no livenessProbe injected", c.Name)
		}
	}
	readers := []reader{
		{s3NS, "s3app", "follower", "/data/hello.txt", helloRoot},
		{s3NS, "s3app", "pinned", "/data/hello.txt", helloRoot},
		{s3NS, "s3app", "sub", "/data/hello.txt", helloSub},
		{s3NS, "s3app", "ro", "/data/hello.txt", helloRoot},
	}
	// The pod of the namespace that did not opt in reads the bucket too, until the loss: the
	// agent acts only for pods of opted-in namespaces (consent), so it is left dead after it.
	plainReader := reader{s3PlainNS, "plain", "app", "/data/hello.txt", helloRoot}
	for _, r := range append(readers, plainReader) {
		if ok, why := readFrom(e, r.ns, r.pod, r.container, r.path, r.want); !ok {
			t.Fatalf("cannot read the bucket before the failure: %s", why)
		}
	}
	checkReadOnly(t, e, s3NS, "s3app", "ro", "before the failure")
	restarts := map[string]map[string]int32{"s3app": restartCounts(pod)}
	plainRestarts := map[string]map[string]int32{"plain": restartCounts(plain)}
	target := podTarget(e, string(pod.UID), s3PV)

	t.Logf("pods before the failure:\n%s%s", framework.PodTable(cs, s3NS), framework.PodTable(cs, s3PlainNS))
	t.Logf("mounts at the pod's volume before the failure:\n%s", framework.MountTable(target))
	// What serves both pods' targets, and which s3fs, before the kill: afterwards another mount
	// must serve them, the killed s3fs be gone and the agent have recorded each restore. A stat
	// right after the kill proves nothing: the agent may have restored the target already.
	witness := witnessKill(t, e, []*corev1.Pod{pod}, []string{target}, pluginS3fs(e.csi))
	t.Logf("deleting the CSI plugin's pod: its s3fs dies with it, %s goes dead; the DaemonSet brings a new one", target)
	t0 := time.Now()
	oldPlugin, err := e.csi.Kill(ctx)
	if err != nil {
		t.Fatalf("delete the CSI plugin pod: %v", err)
	}
	// Put into the bucket on the S3 server's side while the volume is dead: only the bucket
	// itself can show it to the app afterwards.
	const rescued = "put on the S3 server's side while the plugin was down\n"
	putInBucket(t, e, "rescued.txt", rescued)
	putInBucket(t, e, "sub/rescued.txt", rescued)
	if _, err := e.csi.WaitRegistered(ctx, oldPlugin); err != nil {
		t.Fatalf("the DaemonSet's new CSI plugin pod: %v", err)
	}

	// follower follows through HostToContainer; the others get the restored mount from the agent
	// inside their running containers (containermount, hostPID), without a restart.
	var rescuedReaders []reader
	for _, r := range readers {
		r.path, r.want = filepath.Join(filepath.Dir(r.path), "rescued.txt"), rescued
		rescuedReaders = append(rescuedReaders, r)
	}
	at := rescueReads(t, e, t0, 90*time.Second, "again without a restart", []*stack.CSI{e.csi}, append(readers, rescuedReaders...)...)
	checkTopFUSE(t, target, "after the restore")
	checkKubeletMounts(t, e, "after the restore")
	checkPluginMounts(t, e, e.csi, "after the restore")
	afterRestore := []any{checkRestarts(t, e, s3NS, restarts), checkRestarts(t, e, s3PlainNS, plainRestarts)}
	// Consent: the opted-in pod reads again; the one of the unlabelled namespace stays dead —
	// checked once two more S3 passes of the agent ended (one began after the opted-in pod read
	// again; a restore of the plain pod's volume would have started beside the other's).
	looked := waitS3Passes(t, e, 2, 3*time.Minute)
	plainState := fmt.Sprintf("left dead (consent) over two S3 passes of the agent (%s)", looked.Round(100*time.Millisecond))
	if ok, why := readFrom(e, plainReader.ns, plainReader.pod, plainReader.container, plainReader.path, plainReader.want); ok {
		plainState = "READS AGAIN (the agent acted without consent)"
		t.Errorf("the pod of the namespace that did not opt in reads again after the plugin restart: the agent acted for it (%s)", why)
	} else {
		t.Logf("consent: %s/%s left dead as it did not opt in, over two S3 passes of the agent (%s): %s", s3PlainNS, "plain", looked.Round(100*time.Millisecond), why)
	}
	checkReadOnly(t, e, s3NS, "s3app", "ro", "after the restore")
	died := witness.checkVolumeDied(t, e)
	atTarget := mountsAt(target)
	if len(atTarget) > 2 {
		t.Errorf("%d mounts stacked at %s, want at most 2 (the dead one and one live): %s", len(atTarget), target, describeStack(atTarget))
	}
	t.Logf("RESULT lost FUSE mount: the plugin restart killed the volumes: %s", died)
	t.Logf("pods after the repair:\n%s%s", framework.PodTable(cs, s3NS), framework.PodTable(cs, s3PlainNS))
	t.Logf("mounts at the pod's volume after the repair (the dead s3fs mount, the agent's bind on top):\n%s", framework.MountTable(target))
	t.Logf("RESULT lost FUSE mount: read again after the plugin restart: follower (HostToContainer) %s, pinned (None) %s, sub (subPath, reads sub/) %s, ro (readOnly) %s, plain (unlabelled namespace, never mutated) %s; restarts %v %v → %v; depth %d at the target",
		at[s3NS+"/s3app/follower"], at[s3NS+"/s3app/pinned"], at[s3NS+"/s3app/sub"], at[s3NS+"/s3app/ro"], plainState, restarts, plainRestarts, afterRestore, len(atTarget))

	t.Run("AgentRestart", func(t *testing.T) {
		agentRestarts(t, e, func(t *testing.T) any {
			return []any{checkRestarts(t, e, s3NS, restarts), checkRestarts(t, e, s3PlainNS, plainRestarts)}
		}, readers...)
	})

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

	// The pods go: nothing of the driver's or the agent's may stay for either PV.
	goneApp := deletePodGone(t, e, s3NS, "s3app", 30*time.Second)
	gonePlain := deletePodGone(t, e, s3PlainNS, "plain", 30*time.Second)
	checkNothingLeft(t, e, s3PV, s3Bucket)
	checkNothingLeft(t, e, s3PlainPV, s3Bucket)
	checkKubeletMounts(t, e, "after the pods are gone")
	checkPluginMounts(t, e, e.csi, "after the pods are gone")
	t.Logf("RESULT lost FUSE mount: pods deleted and gone in %s and %s, nothing left", goneApp, gonePlain)
}
