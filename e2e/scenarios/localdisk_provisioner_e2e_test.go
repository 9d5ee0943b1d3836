//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pvrescue/pvrescue/e2e/disks"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// The lost-disk scenario with the layout of sig-storage-local-static-provisioner, for non-root
// pods in a namespace that enforces Pod Security "restricted", and with a `require` pod.
//
// The layout, as the provisioner's discovery makes it: the admin links each disk into a
// discovery directory (/mnt/fast-disks/<name> → /dev/disk/by-id/<id>, udev's link to the
// device); the provisioner creates one PV per entry, named local-pv-<fnv32a(file, node, class)>,
// annotated pv.kubernetes.io/provisioned-by: local-volume-provisioner-<node>-<node UID>, labelled
// with the node labels it is told to copy (nodeLabelsForPV: kubernetes.io/hostname), with
// local.path = the discovery entry, volumeMode Block, node affinity on kubernetes.io/hostname
// and the class's reclaim policy (the chart's default class: no-provisioner,
// WaitForFirstConsumer, Delete). The class is the one pvrescue's config names as local.
//
// What a non-root application sees on a fake (decided here, and what the test checks): the
// exec wrapper runs as the application's user and cannot unlink nodes in the container's
// root-owned /dev, so /dev/data2 stays visible; the wrapper says so on the container's stderr.
// The application tells the fake by the guard's report (devices.json, written by the guard as
// the same non-root user from sysfs sizes) and uses the filtered view <mountPath>/dev, which
// holds the real devices only. The fake cannot be written: its loop is read-only, and its node
// (made by the agent, root-owned, not in the disk group) cannot even be opened for writing by
// the application, while the real disks can (group disk, as udev sets them).

const (
	provNS  = "e2e-local-restricted"
	provDir = "/mnt/fast-disks"
	// /dev/loop404..407 (testenv.TestLoops), after the LostLocalDisk scenario's 401..403.
	provFirstDisk = 404
	appUID        = 1000
)

// provisionerName is the provisioner's name on a node (UseNodeNameOnly false).
func provisionerName(n *corev1.Node) string {
	return "local-volume-provisioner-" + n.Name + "-" + string(n.UID)
}

// provisionerPVName is the provisioner's PV name for a discovery entry.
func provisionerPVName(file, node, class string) string {
	h := fnv.New32a()
	h.Write([]byte(file))
	h.Write([]byte(node))
	h.Write([]byte(class))
	return fmt.Sprintf("local-pv-%x", h.Sum32())
}

// provisionerPV is the PV the provisioner makes for the admin link of d in provDir.
func provisionerPV(node *corev1.Node, class string, d *disks.Disk) *corev1.PersistentVolume {
	block := corev1.PersistentVolumeBlock
	host := node.Labels[corev1.LabelHostname]
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{
			Name:        provisionerPVName(d.Name, node.Name, class),
			Labels:      map[string]string{corev1.LabelHostname: host},
			Annotations: map[string]string{"pv.kubernetes.io/provisioned-by": provisionerName(node)},
		},
		Spec: corev1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			// 16 MiB: the provisioner rounds down to whole MiB when there are at least ten.
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(d.Size/(1<<20)*(1<<20), resource.BinarySI)},
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: d.AdminLink(provDir)}},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName:       class,
			VolumeMode:             &block,
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{host}}},
			}}}},
		},
	}
}

func lostLocalDiskProvisionerLayout(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	framework.Namespace(t, cs, provNS, map[string]string{
		contract.LabelInject:                 contract.LabelInjectEnabled,
		"pod-security.kubernetes.io/enforce": "restricted",
	})
	// The namespace really enforces: a pod running as root without the restricted settings is refused.
	if _, err := cs.CoreV1().Pods(provNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "not-restricted"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: e.c.BusyboxImage, Command: []string{"true"}}}},
	}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Fatalf("namespace %s should refuse a pod violating Pod Security restricted, got %v", provNS, err)
	}
	class := localClass()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	reclaim := corev1.PersistentVolumeReclaimDelete
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc, ReclaimPolicy: &reclaim,
	}, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create storageclass: %v", err)
	}
	node, err := cs.CoreV1().Nodes().Get(ctx, e.c.Opts.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !framework.Demo() {
		t.Cleanup(func() {
			if err := disks.RemoveAdminLinks(provDir); err != nil {
				t.Errorf("remove the admin links in %s: %v", provDir, err)
			}
		})
	}
	// Disks 1-3 for the non-root app, disk 4 for the require pod. PVs of the same class are made
	// set by set, so that each StatefulSet's claims bind to its own disks.
	byPV := map[string]*disks.Disk{}
	makeDisks := func(from, to int) {
		for i := from; i <= to; i++ {
			d, err := disks.Make(filepath.Join(e.c.Opts.WorkDir, "disks"), fmt.Sprintf("prov%d", i), provFirstDisk+i-1, diskSize)
			if err != nil {
				t.Fatalf("make disk %d: %v", i, err)
			}
			if err := d.ShareWithGroup(disks.DiskGroup); err != nil {
				t.Fatalf("disk %d: %v", i, err)
			}
			if err := d.LinkInto(provDir); err != nil {
				t.Fatalf("admin link for disk %d: %v", i, err)
			}
			pv := provisionerPV(node, class, d)
			byPV[pv.Name] = d
			if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create pv: %v", err)
			}
			t.Logf("PV %s: local.path %s -> %s -> %s", pv.Name, d.AdminLink(provDir), d.Link(), d.Dev)
		}
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("on failure: PV events and the agent's log\n%s", agentDiagnostics(cs, byPV))
		}
	})
	makeDisks(1, 3)
	nr := restrictedSet("nr", e.c.BusyboxImage, 3, map[string]string{contract.AnnotationRestartOnDiskReturn: "true"})
	if _, err := cs.AppsV1().StatefulSets(provNS).Create(ctx, nr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create statefulset: %v", err)
	}
	nr0 := framework.WaitPod(t, cs, provNS, "nr-0", 3*time.Minute, "Running as uid 1000 on three real disks", framework.Running)
	if !hasInit(nr0, contract.GuardContainerName) {
		t.Fatalf("no %s init container: the webhook did not inject the guard\n%s", contract.GuardContainerName, framework.DescribePod(cs, nr0))
	}
	if rep := guardReportIn(t, e, provNS, "nr-0"); len(rep.Devices) != 3 || fakes(rep) != nil {
		t.Fatalf("before the failure the guard should report 3 real devices, got %+v", rep.Devices)
	}
	makeDisks(4, 4)
	req := restrictedSet("req", e.c.BusyboxImage, 1, map[string]string{contract.AnnotationFakeDevicePolicy: contract.PolicyRequire})
	if _, err := cs.AppsV1().StatefulSets(provNS).Create(ctx, req, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create statefulset: %v", err)
	}
	req0 := framework.WaitPod(t, cs, provNS, "req-0", 3*time.Minute, "Running (require policy) on its real disk", framework.Running)
	t.Logf("pods before the failure:\n%s", framework.PodTable(cs, provNS))

	lostNR := boundDisk(t, e, byPV, "data2-nr-0")
	lostReq := boundDisk(t, e, byPV, "data1-req-0")
	admin := map[string]string{}
	for _, d := range []*disks.Disk{lostNR, lostReq} {
		admin[d.AdminLink(provDir)] = d.Link()
	}
	checkAdminLinks := func(when string) {
		t.Helper()
		for l, want := range admin {
			if got, err := os.Readlink(l); err != nil || got != want {
				t.Errorf("%s: the admin link %s should still point at %s, got %q (%v)", when, l, want, got, err)
			}
		}
	}

	t.Logf("unplugging %s (%s, /dev/data2 of nr-0) and %s (%s, /dev/data1 of req-0); the admin links dangle; deleting both pods",
		lostNR.Link(), lostNR.Dev, lostReq.Link(), lostReq.Dev)
	for _, d := range []*disks.Disk{lostNR, lostReq} {
		if err := d.Unplug(); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	for _, p := range []string{"nr-0", "req-0"} {
		if err := cs.CoreV1().Pods(provNS).Delete(ctx, p, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nrFake := framework.WaitPod(t, cs, provNS, "nr-0", 3*time.Minute, "recreated and Running on a fake device", func(p *corev1.Pod) bool {
		return p.UID != nr0.UID && framework.Running(p)
	})
	onFake := time.Since(t0)
	checkAdminLinks("with the fakes")
	fakeDev := map[*disks.Disk]string{}
	for pvName, d := range byPV {
		if d != lostNR && d != lostReq {
			continue
		}
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dev := pv.Annotations[contract.AnnotationFakeDevice]
		if dev == "" {
			t.Fatalf("PV %s lacks the %s annotation while its disk is lost", pvName, contract.AnnotationFakeDevice)
		}
		fakeDev[d] = dev
		// The fake link is at the by-id component of the chain, not at the admin's link.
		if got, err := os.Readlink(d.Link()); err != nil || got != dev {
			t.Errorf("the fake for PV %s should be linked at %s -> %s, got %q (%v)", pvName, d.Link(), dev, got, err)
		}
		ro, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "ro"))
		if err != nil || strings.TrimSpace(string(ro)) != "1" {
			t.Errorf("fake %s should be a read-only loop, /sys/block/%s/ro = %q (%v)", dev, filepath.Base(dev), ro, err)
		}
	}

	// The non-root app on the fake.
	checkNonRootView(t, e, nrFake)

	// The require pod cannot start: its guard (as uid 1000) refuses the fake, the app never runs.
	reqStuck := framework.WaitPod(t, cs, provNS, "req-0", 3*time.Minute, "held by its guard refusing the fake", func(p *corev1.Pod) bool {
		return p.UID != req0.UID && guardRefused(p) != nil
	})
	if reqStuck.Status.Phase == corev1.PodRunning || appStarted(reqStuck) {
		t.Fatalf("the require pod's app started on a fake\n%s", framework.DescribePod(cs, reqStuck))
	}
	t.Logf("require pod held by its guard: %s", strings.TrimSpace(guardRefused(reqStuck).Message))
	t.Logf("pods with the fakes:\n%s", framework.PodTable(cs, provNS))
	t.Logf("loop devices with the fakes (512 bytes = 1 sector):\n%s", loopsTable(t))

	t.Logf("plugging %s and %s back", lostNR.Link(), lostReq.Link())
	t1 := time.Now()
	for _, d := range []*disks.Disk{lostNR, lostReq} {
		if err := d.Plug(); err != nil {
			t.Fatal(err)
		}
	}
	framework.WaitPod(t, cs, provNS, "req-0", 3*time.Minute, "evicted by the agent and recreated Running on the real disk", func(p *corev1.Pod) bool {
		return p.UID != reqStuck.UID && framework.Running(p)
	})
	reqBack := time.Since(t1)
	framework.WaitPod(t, cs, provNS, "nr-0", 3*time.Minute, "evicted by the agent and recreated Running on the real disk", func(p *corev1.Pod) bool {
		return p.UID != nrFake.UID && framework.Running(p)
	})
	nrBack := time.Since(t1)
	checkAdminLinks("after the disks returned")
	// The old pods went by the agent's eviction: a Pending pod is deleted by nobody else.
	for _, p := range []*corev1.Pod{reqStuck, nrFake} {
		waitFor(t, 30*time.Second, "the agent's eviction Event on "+p.Name+" "+string(p.UID), func() (bool, string) {
			evs, err := cs.CoreV1().Events(provNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(p.UID)})
			if err != nil {
				return false, err.Error()
			}
			var seen []string
			for _, ev := range evs.Items {
				if ev.Reason == contract.ReasonEvictedForRealDisk {
					return true, ""
				}
				seen = append(seen, ev.Reason)
			}
			return false, "events: " + strings.Join(seen, ", ")
		})
	}
	if rep := guardReportIn(t, e, provNS, "req-0"); len(rep.Devices) != 1 || fakes(rep) != nil {
		t.Errorf("the require pod should be on its real disk, guard reported %+v", rep.Devices)
	}
	if rep := guardReportIn(t, e, provNS, "nr-0"); len(rep.Devices) != 3 || fakes(rep) != nil {
		t.Errorf("back on the real disk the guard should report 3 real devices, got %+v", rep.Devices)
	}
	if out, err := execIn(e, provNS, "nr-0", "app", "blockdev", "--getsize64", "/dev/data2"); err != nil || strings.TrimSpace(out) != fmt.Sprint(diskSize) {
		t.Errorf("/dev/data2 should be the %d-byte real disk again (read as uid %d), got %q (%v)", diskSize, appUID, out, err)
	}
	waitFor(t, time.Minute, "the fakes to be retired (PV annotations, loop devices, images)", func() (bool, string) {
		for pvName, d := range byPV {
			if fakeDev[d] == "" {
				continue
			}
			pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if v := pv.Annotations[contract.AnnotationFakeDevice]; v != "" {
				return false, "PV " + pvName + " still annotated " + v
			}
		}
		state := config.Default().StateDir
		if l := loopsUnder(state); len(l) > 0 {
			return false, "loop devices still backed by the agent's images: " + strings.Join(l, ", ")
		}
		if imgs, _ := filepath.Glob(filepath.Join(state, "*", "*.img")); len(imgs) > 0 {
			return false, "images left: " + strings.Join(imgs, ", ")
		}
		return true, ""
	})
	t.Logf("pods back on the real disks:\n%s", framework.PodTable(cs, provNS))
	t.Logf("RESULT provisioner layout, non-root, restricted: pod Running on a 512-byte fake %s after the pod deletion; back on the real disk %s after the disk returned",
		onFake.Round(100*time.Millisecond), nrBack.Round(100*time.Millisecond))
	t.Logf("RESULT require policy: held by its guard while the disk was lost; evicted by the agent and Running on the real disk %s after the disk returned",
		reqBack.Round(100*time.Millisecond))
}

// checkNonRootView checks what the non-root app of pod sees while /dev/data2 is a fake.
func checkNonRootView(t *testing.T, e *env, pod *corev1.Pod) {
	t.Helper()
	mp := config.Default().Helper.MountPath
	rep := guardReportIn(t, e, provNS, pod.Name)
	if got := fakes(rep); len(got) != 1 || got[0] != "/dev/data2" {
		t.Errorf("guard should report exactly /dev/data2 as fake, reported %v (%+v)", got, rep.Devices)
	}
	// The guard ran as the app's user: its report is the user's file.
	if out, err := execIn(e, provNS, pod.Name, "app", "stat", "-c", "%u", filepath.Join(mp, contract.DevicesFile)); err != nil || strings.TrimSpace(out) != fmt.Sprint(appUID) {
		t.Errorf("the guard's report should be written by uid %d, owner %q (%v)", appUID, out, err)
	}
	if out, err := execIn(e, provNS, pod.Name, "app", "id", "-u"); err != nil || strings.TrimSpace(out) != fmt.Sprint(appUID) {
		t.Errorf("the app should run as uid %d, got %q (%v)", appUID, out, err)
	}
	view, err := execIn(e, provNS, pod.Name, "app", "ls", filepath.Join(mp, contract.FilteredDevDir))
	if err != nil || strings.Join(strings.Fields(view), " ") != "data1 data3" {
		t.Errorf("filtered view %s/%s should hold data1 data3, got %q (%v)", mp, contract.FilteredDevDir, view, err)
	}
	// The wrapper, as uid 1000, cannot unlink the fake node in the root-owned /dev: it says so.
	devs, err := execIn(e, provNS, pod.Name, "app", "sh", "-c", "ls /dev | grep '^data' || true")
	if err != nil || strings.Join(strings.Fields(devs), " ") != "data1 data2 data3" {
		t.Errorf("a non-root app's /dev keeps all three nodes (the wrapper cannot unlink as non-root), got %q (%v)", devs, err)
	}
	logCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	logs, err := framework.Logs(logCtx, e.c.Client, provNS, pod.Name, "app")
	if err != nil || !strings.Contains(logs, "cannot remove fake device /dev/data2") || !strings.Contains(logs, filepath.Join(mp, contract.FilteredDevDir)+" lists the real devices only") {
		t.Errorf("the wrapper should tell on stderr that it cannot remove /dev/data2 and where the real devices are; log %q (%v)", logs, err)
	}
	// Reading a real disk through the view works as uid 1000 (group disk).
	if out, err := execIn(e, provNS, pod.Name, "app", "sh", "-c", "dd if="+filepath.Join(mp, contract.FilteredDevDir, "data1")+" of=/dev/null bs=4096 count=1 2>&1"); err != nil {
		t.Errorf("reading the real disk through the view as uid %d: %q (%v)", appUID, out, err)
	}
	// Writing: the real disk takes it, the fake refuses it.
	write := func(dev string) (string, bool) {
		out, err := execIn(e, provNS, pod.Name, "app", "sh", "-c", "dd if=/dev/zero of="+dev+" bs=512 count=1 conv=notrunc,fsync 2>&1; echo rc=$?")
		if err != nil {
			t.Fatalf("write attempt on %s: %v", dev, err)
		}
		out = strings.TrimSpace(out)
		return out, strings.HasSuffix(out, "rc=0")
	}
	if out, ok := write("/dev/data1"); !ok {
		t.Errorf("the app (uid %d, group disk) should be able to write its real disk /dev/data1: %s", appUID, out)
	}
	out, ok := write("/dev/data2")
	if ok {
		t.Errorf("a write to the fake /dev/data2 must fail, it succeeded: %s", out)
	}
	// The app can see for itself, without opening the node, that the fake is a read-only disk of
	// one sector (sysfs is readable by any user).
	sysfs := `set -- $(stat -c "%t %T" /dev/data2); d=/sys/dev/block/$(printf %d:%d 0x$1 0x$2); echo $(cat $d/ro) $(cat $d/size)`
	if got, err := execIn(e, provNS, pod.Name, "app", "sh", "-c", sysfs); err != nil || strings.TrimSpace(got) != "1 1" {
		t.Errorf("from the app, /dev/data2's sysfs should say read-only and 1 sector (\"1 1\"), got %q (%v)", got, err)
	}
	t.Logf("non-root app on the fake: report %+v; view %s/%s = %q; /dev = %q; write to the fake: %s",
		rep.Devices, mp, contract.FilteredDevDir, strings.Join(strings.Fields(view), " "), strings.Join(strings.Fields(devs), " "), out)
}

// boundDisk is the disk of the PV a claim is bound to.
func boundDisk(t *testing.T, e *env, byPV map[string]*disks.Disk, claim string) *disks.Disk {
	t.Helper()
	pvc, err := e.c.Client.CoreV1().PersistentVolumeClaims(provNS).Get(context.Background(), claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := byPV[pvc.Spec.VolumeName]
	if d == nil {
		t.Fatalf("claim %s bound to unexpected PV %q", claim, pvc.Spec.VolumeName)
	}
	return d
}

// guardRefused is the guard's failed termination (current or last), nil while it has not failed.
func guardRefused(p *corev1.Pod) *corev1.ContainerStateTerminated {
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name != contract.GuardContainerName {
			continue
		}
		for _, st := range []*corev1.ContainerStateTerminated{s.State.Terminated, s.LastTerminationState.Terminated} {
			if st != nil && st.ExitCode != 0 {
				return st
			}
		}
	}
	return nil
}

func appStarted(p *corev1.Pod) bool {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// restrictedSet is a StatefulSet of one pod whose containers run as uid 1000 under Pod Security
// "restricted", with n block claims of the local class as /dev/data1..n. The pod reads its raw
// devices through the disk group, as non-root applications on raw disks do.
func restrictedSet(name, image string, n int, annotations map[string]string) *appsv1.StatefulSet {
	labels := map[string]string{"app": name}
	block := corev1.PersistentVolumeBlock
	class := localClass()
	var claims []corev1.PersistentVolumeClaim
	var devices []corev1.VolumeDevice
	for i := 1; i <= n; i++ {
		c := fmt.Sprintf("data%d", i)
		claims = append(claims, corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: c},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class, VolumeMode: &block,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(diskSize, resource.BinarySI)}},
			},
		})
		devices = append(devices, corev1.VolumeDevice{Name: c, DevicePath: "/dev/" + c})
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr(int32(1)), ServiceName: name,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(appUID)), RunAsGroup: ptr(int64(appUID)),
						SupplementalGroups: []int64{disks.DiskGroup},
						SeccompProfile:     &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name: "app", Image: image, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
						VolumeDevices: devices,
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr(false),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
				},
			},
			VolumeClaimTemplates: claims,
		},
	}
}

// agentDiagnostics is the Events of the PVs and the tail of every agent pod's log.
func agentDiagnostics(cs kubernetes.Interface, byPV map[string]*disks.Disk) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var b strings.Builder
	evs, err := cs.CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=PersistentVolume"})
	if err != nil {
		fmt.Fprintf(&b, "  events: %v\n", err)
	} else {
		for _, ev := range evs.Items {
			if byPV[ev.InvolvedObject.Name] != nil {
				fmt.Fprintf(&b, "  event %s %s %s: %s\n", ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message)
			}
		}
	}
	pods, err := cs.CoreV1().Pods(contract.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintf(&b, "  agent pods: %v\n", err)
		return b.String()
	}
	for _, p := range pods.Items {
		if !strings.HasPrefix(p.Name, "pvrescue-agent") {
			continue
		}
		tail := int64(60)
		out, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{TailLines: &tail}).DoRaw(ctx)
		fmt.Fprintf(&b, "  --- %s (err %v) ---\n%s\n", p.Name, err, out)
	}
	return b.String()
}
