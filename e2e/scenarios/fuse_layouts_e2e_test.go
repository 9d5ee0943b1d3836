//go:build e2e

package scenarios

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// fieldLayout is one S3 driver layout of the field, imitated by an instance of the test plugin.
type fieldLayout struct {
	name, driver, layout string
	ns, pv, handle       string
	attrs                map[string]string
	stage                bool
	// files are written into the bucket directory before the pods start; the app reads want
	// from /data/app.txt.
	files map[string]string
	want  string
	// dataDir is the key prefix in the bucket that the app's /data shows; src is the s3fs source
	// (bucket:/<dir>) of the volume's mounts.
	dataDir, src string

	plugin *stack.CSI
}

func (l *fieldLayout) globalMount(e *env) string {
	sum := sha256.Sum256([]byte(l.handle))
	return filepath.Join(e.c.Opts.KubeletDir, "plugins", "kubernetes.io", "csi", l.driver, hex.EncodeToString(sum[:]), "globalmount")
}

// fieldLayouts are ru.yandex.s3.csi (STAGE_UNSTAGE: s3fs at kubelet's staging path, a bind per
// target, NodeUnpublish unmounts the top only; handle bucket/prefix, mounter attribute) and
// ch.ctrox.csi.s3-driver (s3fs of bucket:/<prefix>/csi-fs directly at the target, top-only
// NodeUnpublish). The ctrox prefix holds a decoy app.txt one level too high: an app shown the
// prefix instead of csi-fs reads the decoy.
func fieldLayouts() []*fieldLayout {
	return []*fieldLayout{
		{
			name: "yandex", driver: "ru.yandex.s3.csi", layout: csitest.LayoutYandex,
			ns: "e2e-fuse-yandex", pv: "e2e-fuse-yandex-pv", handle: s3Bucket + "/yandex",
			attrs: map[string]string{"mounter": "s3fs"}, stage: true,
			files: map[string]string{"yandex/app.txt": "yandex app data\n"},
			want:  "yandex app data\n", dataDir: "yandex/", src: s3Bucket + ":/yandex",
		},
		{
			name: "ctrox", driver: "ch.ctrox.csi.s3-driver", layout: csitest.LayoutCtrox,
			ns: "e2e-fuse-ctrox", pv: "e2e-fuse-ctrox-pv", handle: s3Bucket + "/ctrox",
			attrs: map[string]string{"bucket": s3Bucket, "prefix": "ctrox", "mounter": "s3fs"},
			files: map[string]string{
				"ctrox/csi-fs/app.txt":   "ctrox app data\n",
				"ctrox/app.txt":          "DECOY: the prefix level, one above csi-fs\n",
				"ctrox/.metadata.json":   "{}\n",
				"ctrox/csi-fs/.keep.txt": "",
			},
			want: "ctrox app data\n", dataDir: "ctrox/csi-fs/", src: s3Bucket + ":/ctrox/csi-fs",
		},
	}
}

func appContainers(image string) []corev1.Container {
	none := corev1.MountPropagationNone
	loop := []string{"sh", "-c", "while true; do sleep 1; done"}
	return []corev1.Container{
		{Name: "app", Image: image, Command: loop, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}},
		{Name: "pinned", Image: image, Command: loop, VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", MountPropagation: &none}}},
	}
}

func dataVolume() []corev1.Volume {
	return []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
	}}}
}

// setupLayout starts the plugin instance, writes the files, creates namespace, PV, PVC and a
// StatefulSet "app" of one pod; cleanup removes all of it (plugin last).
func setupLayout(t testing.TB, e *env, l *fieldLayout) {
	t.Helper()
	layoutObjects(t, e, l)
	labels := map[string]string{"app": "fuse-" + l.name}
	ss := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr(false),
					TerminationGracePeriodSeconds: ptr(int64(1)),
					Containers:                    appContainers(e.c.BusyboxImage),
					Volumes:                       dataVolume(),
				},
			},
		},
	}
	if _, err := e.c.Client.AppsV1().StatefulSets(l.ns).Create(context.Background(), ss, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create StatefulSet in %s: %v", l.ns, err)
	}
}

// layoutObjects starts the plugin instance, writes the files into the bucket, creates an
// opted-in namespace and the PV/PVC. Cleanup removes all of it, the plugin last (after the
// pods' teardown, which needs it).
func layoutObjects(t testing.TB, e *env, l *fieldLayout) {
	t.Helper()
	l.plugin = sibling(t, e, l.driver, l.layout)
	dir, err := e.s3.Bucket(s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range l.files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(dir, l.name)) })
	fuseNamespace(t, e, l.ns, true)
	s3Volume(t, e, s3Vol{ns: l.ns, pv: l.pv, driver: l.driver, handle: l.handle, attrs: l.attrs, stageSecret: l.stage})
	deletePVAtCleanup(t, e, l.pv)
	logAgentOnFailure(t, e, l.pv, l.driver)
}

func (l *fieldLayout) readers(pod string) []reader {
	return []reader{
		{l.ns, pod, "app", "/data/app.txt", l.want},
		{l.ns, pod, "pinned", "/data/app.txt", l.want},
	}
}

// lostFUSEMountLayouts: for both field layouts at once (one restart of each plugin): the plugin
// restarted → the apps read their own file again without a restart; a new pod of the same PV
// starts; the pods are deleted and gone within 30 s with nothing left at their targets; the
// StatefulSet pod is replaced and the new one reads.
func lostFUSEMountLayouts(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	ls := fieldLayouts()
	for _, l := range ls {
		setupLayout(t, e, l)
	}
	var all []reader
	restarts := map[string]map[string]map[string]int32{}
	targets := map[string]string{}
	for _, l := range ls {
		p := framework.WaitPod(t, cs, l.ns, "app-0", 2*time.Minute, "Running", framework.Running)
		for _, r := range l.readers("app-0") {
			if ok, why := readFrom(e, r.ns, r.pod, r.container, r.path, r.want); !ok {
				t.Fatalf("%s layout: cannot read before the failure: %s\nmounts: %s", l.name, why, framework.MountTable(podTarget(e, string(p.UID), l.pv)))
			}
		}
		all = append(all, l.readers("app-0")...)
		restarts[l.name] = map[string]map[string]int32{"app-0": restartCounts(p)}
		targets[l.name] = podTarget(e, string(p.UID), l.pv)
		t.Logf("%s layout before the failure: target %s, global %s", l.name, describeStack(mountsAt(targets[l.name])), describeStack(mountsAt(l.globalMount(e))))
	}

	t.Logf("deleting the %s and %s plugin pods: their s3fs die; their DaemonSets bring new ones", ls[0].driver, ls[1].driver)
	t0 := time.Now()
	old := map[string]types.UID{}
	for _, l := range ls {
		uid, err := l.plugin.Kill(ctx)
		if err != nil {
			t.Fatalf("delete the %s plugin pod: %v", l.name, err)
		}
		old[l.name] = uid
	}
	// Put into the bucket on the S3 server's side while the volumes are dead.
	var rescued []reader
	for _, l := range ls {
		want := "put on the S3 server's side for " + l.name + " while its plugin was down\n"
		putInBucket(t, e, l.dataDir+"rescued.txt", want)
		for _, r := range l.readers("app-0") {
			r.path, r.want = "/data/rescued.txt", want
			rescued = append(rescued, r)
		}
	}
	var plugins []*stack.CSI
	for _, l := range ls {
		if _, err := l.plugin.WaitRegistered(ctx, old[l.name]); err != nil {
			t.Fatalf("the %s DaemonSet's new plugin pod: %v", l.name, err)
		}
		plugins = append(plugins, l.plugin)
	}
	at := rescueReads(t, e, t0, 90*time.Second, "again after the plugin pods were replaced", plugins, append(all, rescued...)...)
	// While a plugin did not answer the agent bridged at once with its own s3fs; its new pod
	// answers now: the volume goes back to the driver's own mount.
	for _, l := range ls {
		waitHandedBack(t, targets[l.name], l.pv, l.plugin)
	}
	checkKubeletMounts(t, e, "after the restore")
	for _, l := range ls {
		checkTopFUSE(t, targets[l.name], l.name+" layout, the pod's target after the restore")
		if l.stage {
			checkTopFUSE(t, l.globalMount(e), l.name+" layout, kubelet's staging path after the restore")
		}
		checkPluginMounts(t, e, l.plugin, l.name+" layout after the restore")
		writeReachesBucket(t, e, l.ns, "app-0", "app", "/data/after-rescue.txt", l.dataDir+"after-rescue.txt", "after the restore")
	}
	for _, l := range ls {
		after := checkRestarts(t, e, l.ns, restarts[l.name])
		if onOurMount(targets[l.name], l.pv) {
			t.Errorf("%s layout: the agent's own s3fs %v still serves the target (top %s), not the driver's mount, although the plugin answers",
				l.name, ourS3fs(l.pv), describeStack(mountsAt(targets[l.name])))
		}
		tgt, glob := mountsAt(targets[l.name]), mountsAt(l.globalMount(e))
		if len(tgt) > 2 || len(glob) > 2 {
			t.Errorf("%s layout: stacks too deep after the restore: target %s, global %s", l.name, describeStack(tgt), describeStack(glob))
		}
		t.Logf("RESULT %s layout: plugin restart → app reads its own file again after %s, pinned (None) %s, restarts %v → %v; depth %d at the target %s, %d at the staging path %s",
			l.name, at[l.ns+"/app-0/app"], at[l.ns+"/app-0/pinned"], restarts[l.name], after, len(tgt), describeStack(tgt), len(glob), describeStack(glob))
	}

	// A new pod of the same PV starts (the restored mounts serve kubelet's paths too).
	for _, l := range ls {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "newpod"},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
				Containers: appContainers(e.c.BusyboxImage)[:1], Volumes: dataVolume(),
			},
		}
		if _, err := cs.CoreV1().Pods(l.ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create a new pod of the %s PV: %v", l.name, err)
		}
	}
	for _, l := range ls {
		t1 := time.Now()
		framework.WaitPod(t, cs, l.ns, "newpod", 2*time.Minute, "Running", framework.Running)
		waitReads(t, e, t1, 30*time.Second, "in the new pod", l.readers("newpod")[0])
		t.Logf("RESULT %s layout: a new pod of the restored PV runs and reads after %s", l.name, time.Since(t1).Round(100*time.Millisecond))
	}

	// The rescued StatefulSet pod is deleted: it goes within 30 s with nothing left at its
	// targets, and its replacement runs and reads.
	for _, l := range ls {
		old := podUID(t, e, l.ns, "app-0")
		gone := deletePodGone(t, e, l.ns, "app-0", 30*time.Second)
		t1 := time.Now()
		framework.WaitPod(t, cs, l.ns, "app-0", 2*time.Minute, "Running (the replacement)", func(p *corev1.Pod) bool {
			return p.UID != old && framework.Running(p)
		})
		waitReads(t, e, t1, 30*time.Second, "in the replacement pod", l.readers("app-0")...)
		t.Logf("RESULT %s layout: rescued pod app-0 deleted and gone in %s; replacement running and reading after %s more",
			l.name, gone, time.Since(t1).Round(100*time.Millisecond))
	}

	// Every pod of the PV goes: the new pod, then the StatefulSet scaled to 0. Nothing stays at
	// the targets, nor (staging layout) at kubelet's staging path once the last pod is gone.
	for _, l := range ls {
		goneNew := deletePodGone(t, e, l.ns, "newpod", 30*time.Second)
		uid := podUID(t, e, l.ns, "app-0")
		t1 := time.Now()
		if _, err := cs.AppsV1().StatefulSets(l.ns).Patch(ctx, "app", types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("scale the %s StatefulSet to 0: %v", l.name, err)
		}
		waitFor(t, 30*time.Second, fmt.Sprintf("%s: app-0 to be gone after scaling to 0", l.name), func() (bool, string) {
			p, err := cs.CoreV1().Pods(l.ns).Get(ctx, "app-0", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return true, ""
			}
			if err != nil {
				return false, err.Error()
			}
			return false, framework.DescribePod(cs, p)
		})
		goneSS := time.Since(t1).Round(100 * time.Millisecond)
		checkPodLeftNothing(t, e, l.ns+"/app-0", string(uid))
		if l.stage {
			waitFor(t, 30*time.Second, l.name+": kubelet's staging path to be empty after the last pod", func() (bool, string) {
				m := mountsAt(l.globalMount(e))
				return len(m) == 0, describeStack(m)
			})
		}
		checkNothingLeft(t, e, l.pv, l.src)
		checkPluginMounts(t, e, l.plugin, l.name+" layout after the last pod")
		t.Logf("RESULT %s layout: new pod deleted and gone in %s, StatefulSet pod gone %s after scaling to 0", l.name, goneNew, goneSS)
	}
}

func podUID(t testing.TB, e *env, ns, name string) types.UID {
	t.Helper()
	p, err := e.c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return p.UID
}
