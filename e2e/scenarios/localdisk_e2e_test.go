//go:build e2e

package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/disks"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/sidecar"
)

const (
	localNS  = "e2e-local"
	diskSize = 16 << 20
	// /dev/loop401..403 (testenv.TestLoops): outside the agent's loop range (101 + loopSearchLimit),
	// where a recorded link to a loop counts as the agent's own stale fake.
	firstDisk = 401
)

func localClass() string { return config.Default().LocalBlock.StorageClasses[0] }

func lostLocalDisk(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	framework.Namespace(t, cs, localNS, map[string]string{contract.LabelInject: contract.LabelInjectEnabled})
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: localClass()}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create storageclass: %v", err)
	}
	byPV := map[string]*disks.Disk{}
	for i := 1; i <= 3; i++ {
		d, err := disks.Make(filepath.Join(e.c.Opts.WorkDir, "disks"), fmt.Sprintf("disk%d", i), firstDisk+i-1, diskSize)
		if err != nil {
			t.Fatalf("make disk %d: %v", i, err)
		}
		// No per-test removal: the StatefulSet and PVs stay to the end (and in the demo), and
		// unlinking the disks under them would only make the agent fake all three. Cluster teardown
		// detaches loop devices backed by files in the work dir and removes the by-id links.
		pv := fmt.Sprintf("e2e-local-%d", i)
		byPV[pv] = d
		createLocalBlockPV(t, cs, pv, d.Link(), e.c.Opts.NodeName, "", "")
	}
	if _, err := cs.AppsV1().StatefulSets(localNS).Create(ctx, statefulSet(e.c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create statefulset: %v", err)
	}
	first := framework.WaitPod(t, cs, localNS, "app-0", 3*time.Minute, "Running on three real disks", framework.Running)
	if !hasInit(first, contract.GuardContainerName) {
		t.Fatalf("no %s init container: the webhook did not inject the guard\n%s", contract.GuardContainerName, framework.DescribePod(cs, first))
	}
	rep := guardReport(t, e, "app-0")
	if n := len(rep.Devices); n != 3 || fakes(rep) != nil {
		t.Fatalf("before the failure the guard should report 3 real devices, got %+v", rep.Devices)
	}
	t.Logf("pods before the failure:\n%s", framework.PodTable(cs, localNS))
	t.Logf("loop devices before the failure:\n%s", loopsTable(t))

	// Which disk backs /dev/data2?
	pvc, err := cs.CoreV1().PersistentVolumeClaims(localNS).Get(ctx, "data2-app-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lost := byPV[pvc.Spec.VolumeName]
	if lost == nil {
		t.Fatalf("claim data2-app-0 bound to unexpected PV %q", pvc.Spec.VolumeName)
	}
	t.Logf("unplugging %s (%s, PV %s, /dev/data2 in the pod) and deleting the pod", lost.Link(), lost.Dev, pvc.Spec.VolumeName)
	if err := lost.Unplug(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := cs.CoreV1().Pods(localNS).Delete(ctx, "app-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second := framework.WaitPod(t, cs, localNS, "app-0", 3*time.Minute, "recreated and Running on a fake device", func(p *corev1.Pod) bool {
		return p.UID != first.UID && framework.Running(p)
	})
	onFake := time.Since(t0)
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pv.Annotations[contract.AnnotationFakeDevice] == "" {
		t.Errorf("PV %s lacks the %s annotation while a fake stands in", pv.Name, contract.AnnotationFakeDevice)
	}
	rep = guardReport(t, e, "app-0")
	if got := fakes(rep); len(got) != 1 || got[0] != "/dev/data2" {
		t.Errorf("guard should report exactly /dev/data2 as fake, reported %v (%+v)", got, rep.Devices)
	}
	view, err := execIn(e, localNS, "app-0", "app", "ls", filepath.Join(config.Default().Helper.MountPath, contract.FilteredDevDir))
	if err != nil || strings.Join(strings.Fields(view), " ") != "data1 data3" {
		t.Errorf("filtered view %s/%s should hold data1 data3, got %q (%v)", config.Default().Helper.MountPath, contract.FilteredDevDir, view, err)
	}
	devs, err := execIn(e, localNS, "app-0", "app", "sh", "-c", "ls /dev | grep '^data' || true")
	if err != nil || strings.Join(strings.Fields(devs), " ") != "data1 data3" {
		t.Errorf("after the exec wrapper the app should see /dev/data1 and /dev/data3 only, got %q (%v)", devs, err)
	}
	t.Logf("pods with the fake:\n%s", framework.PodTable(cs, localNS))
	t.Logf("loop devices with the fake (512 bytes = 1 sector):\n%s", loopsTable(t))
	t.Logf("guard report: %+v", rep.Devices)

	t.Logf("plugging %s back", lost.Link())
	t1 := time.Now()
	if err := lost.Plug(); err != nil {
		t.Fatal(err)
	}
	framework.WaitPod(t, cs, localNS, "app-0", 3*time.Minute, "recreated on the real disk after the agent's eviction", func(p *corev1.Pod) bool {
		return p.UID != second.UID && framework.Running(p)
	})
	back := time.Since(t1)
	rep = guardReport(t, e, "app-0")
	if len(rep.Devices) != 3 || fakes(rep) != nil {
		t.Errorf("back on the real disk the guard should report 3 real devices, got %+v", rep.Devices)
	}
	if out, err := execIn(e, localNS, "app-0", "app", "blockdev", "--getsize64", "/dev/data2"); err != nil || strings.TrimSpace(out) != fmt.Sprint(diskSize) {
		t.Errorf("/dev/data2 should be the %d-byte real disk again, got %q (%v)", diskSize, out, err)
	}
	waitFor(t, time.Minute, "the fake to be retired (PV annotation, loop device, image)", func() (bool, string) {
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if v := pv.Annotations[contract.AnnotationFakeDevice]; v != "" {
			return false, "PV still annotated " + v
		}
		state := config.Default().StateDir
		if l := loopsUnder(state); len(l) > 0 {
			return false, "loop devices still backed by the agent's images: " + strings.Join(l, ", ")
		}
		imgs, _ := filepath.Glob(filepath.Join(state, "*", "*.img"))
		if len(imgs) > 0 {
			return false, "images left: " + strings.Join(imgs, ", ")
		}
		return true, ""
	})
	t.Logf("pods back on the real disk:\n%s", framework.PodTable(cs, localNS))
	t.Logf("loop devices after the fake was retired:\n%s", loopsTable(t))
	t.Logf("RESULT lost local disk: pod Running on a 512-byte fake %s after the pod deletion; recreated on the real disk %s after the disk came back; fake retired",
		onFake.Round(100*time.Millisecond), back.Round(100*time.Millisecond))
}

func statefulSet(image string) *appsv1.StatefulSet {
	labels := map[string]string{"app": "local"}
	block := corev1.PersistentVolumeBlock
	class := localClass()
	var claims []corev1.PersistentVolumeClaim
	var devices []corev1.VolumeDevice
	for i := 1; i <= 3; i++ {
		n := fmt.Sprintf("data%d", i)
		claims = append(claims, corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: n},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class, VolumeMode: &block,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(diskSize, resource.BinarySI)}},
			},
		})
		devices = append(devices, corev1.VolumeDevice{Name: n, DevicePath: "/dev/" + n})
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "app"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(1)), ServiceName: "app",
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{contract.AnnotationRestartOnDiskReturn: "true"}},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
					Containers: []corev1.Container{{
						Name: "app", Image: image, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
						VolumeDevices: devices,
					}},
				},
			},
			VolumeClaimTemplates: claims,
		},
	}
}

func hasInit(p *corev1.Pod, name string) bool {
	for _, c := range p.Spec.InitContainers {
		if c.Name == name {
			return true
		}
	}
	return false
}

func guardReport(t *testing.T, e *env, pod string) sidecar.Report {
	t.Helper()
	return guardReportIn(t, e, localNS, pod)
}

// guardReportIn reads the guard's report from the app container of ns/pod.
func guardReportIn(t *testing.T, e *env, ns, pod string) sidecar.Report {
	t.Helper()
	path := filepath.Join(config.Default().Helper.MountPath, contract.DevicesFile)
	out, err := execIn(e, ns, pod, "app", "cat", path)
	if err != nil {
		t.Fatalf("read the guard's report %s: %v", path, err)
	}
	var r sidecar.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("decode the guard's report %q: %v", out, err)
	}
	return r
}

func fakes(r sidecar.Report) []string {
	var out []string
	for _, d := range r.Devices {
		if d.Fake {
			out = append(out, d.Path)
		}
	}
	sort.Strings(out)
	return out
}

// loopsUnder lists the loop devices whose backing file is under dir.
func loopsUnder(dir string) []string {
	var out []string
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && cluster.UnderAny(string(b), dir) {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f)))+"="+strings.TrimSpace(string(b)))
		}
	}
	return out
}

// loopsTable is "device  size  backing file" for every attached loop device, for the narration.
func loopsTable(t *testing.T) string {
	var b strings.Builder
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	sort.Strings(files)
	for _, f := range files {
		dev := filepath.Base(filepath.Dir(filepath.Dir(f)))
		back, _ := os.ReadFile(f)
		size, _ := os.ReadFile(filepath.Join("/sys/block", dev, "size"))
		fmt.Fprintf(&b, "  /dev/%-8s %6s sectors  %s\n", dev, strings.TrimSpace(string(size)), strings.TrimSpace(string(back)))
	}
	return b.String()
}

// localBlockPV is a Retain local block PV of diskSize in localClass() at path on node; claimNS and
// claimName, when set, pre-bind it to that claim.
func localBlockPV(name, path, node, claimNS, claimName string) *corev1.PersistentVolume {
	block := corev1.PersistentVolumeBlock
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(diskSize, resource.BinarySI)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              localClass(),
			VolumeMode:                    &block,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}}},
		},
	}
	if claimName != "" {
		pv.Spec.ClaimRef = &corev1.ObjectReference{Namespace: claimNS, Name: claimName}
	}
	return pv
}

// createLocalBlockPV creates localBlockPV(name, path, node, claimNS, claimName).
func createLocalBlockPV(t testing.TB, cs kubernetes.Interface, name, path, node, claimNS, claimName string) {
	t.Helper()
	if _, err := cs.CoreV1().PersistentVolumes().Create(context.Background(), localBlockPV(name, path, node, claimNS, claimName), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PV %s: %v", name, err)
	}
}

// localBlockClaim is a block claim of diskSize in localClass() for the PV named pv.
func localBlockClaim(ns, name, pv string) *corev1.PersistentVolumeClaim {
	block := corev1.PersistentVolumeBlock
	class := localClass()
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class, VolumeMode: &block, VolumeName: pv,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(diskSize, resource.BinarySI)}},
		},
	}
}
