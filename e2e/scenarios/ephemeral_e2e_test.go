//go:build e2e

package scenarios

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/disks"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

const (
	ephemeralNS = "e2e-ephemeral"
	// /dev/loop425 (testenv.TestLoops), clear of every other scenario's disks.
	ephemeralDiskMinor = 425
)

// lostLocalDiskEphemeral: a pod whose local block volume is a generic ephemeral volume (its claim
// made by Kubernetes, <pod>-<volume>, controlled by the pod) starts while the disk behind the PV
// it binds to is missing. The webhook guards it; the agent must fake the disk for it as for a
// claim volume, or kubelet's MapVolume fails and the pod never starts.
func lostLocalDiskEphemeral(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	framework.Namespace(t, cs, ephemeralNS, map[string]string{contract.LabelInject: contract.LabelInjectEnabled})
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: localClass()}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create storageclass: %v", err)
	}
	d, err := disks.Make(filepath.Join(e.c.Opts.WorkDir, "disks"), "ephemeral", ephemeralDiskMinor, diskSize)
	if err != nil {
		t.Fatalf("make disk: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Remove(); err != nil {
			t.Errorf("cleanup: remove disk %s: %v", d.Name, err)
		}
	})
	const pvName = "e2e-ephemeral-1"
	createLocalBlockPV(t, cs, pvName, d.Link(), e.c.Opts.NodeName, "", "")
	deletePVAtCleanup(t, e, pvName)
	// Runs first (cleanups run last-registered first): the pod goes before its PV and disk.
	t.Cleanup(func() { deleteNamespace(t, e, ephemeralNS) })

	// The disk is lost before the pod exists: the pod can only start on a fake.
	if err := d.Unplug(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(d.Link()); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("premise: %s should be missing after the unplug: %v", d.Link(), err)
	}
	t0 := time.Now()
	if _, err := cs.CoreV1().Pods(ephemeralNS).Create(ctx, ephemeralPod(e.c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	pod := framework.WaitPod(t, cs, ephemeralNS, "eph-0", 3*time.Minute, "Running on a fake device", framework.Running)
	onFake := time.Since(t0)
	if !hasInit(pod, contract.GuardContainerName) {
		t.Fatalf("premise: no %s init container: the webhook did not guard the ephemeral volume\n%s", contract.GuardContainerName, framework.DescribePod(cs, pod))
	}
	// Premise: the claim is the one Kubernetes made for the ephemeral volume, controlled by the
	// pod, and bound to our PV both ways.
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ephemeralNS).Get(ctx, "eph-0-scratch", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("premise: the ephemeral volume's claim: %v", err)
	}
	if !metav1.IsControlledBy(pvc, pod) || pvc.Spec.VolumeName != pvName || pvc.Status.Phase != corev1.ClaimBound {
		t.Fatalf("premise: claim %s should be Bound to %s and controlled by pod eph-0 (uid %s): volume %q, phase %s, owners %+v",
			pvc.Name, pvName, pod.UID, pvc.Spec.VolumeName, pvc.Status.Phase, pvc.OwnerReferences)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.UID != pvc.UID {
		t.Fatalf("premise: PV %s claimRef %+v should name claim uid %s", pvName, ref, pvc.UID)
	}
	fake := pv.Annotations[contract.AnnotationFakeDevice]
	if fake == "" {
		t.Errorf("PV %s lacks the %s annotation while the pod runs with its disk missing", pvName, contract.AnnotationFakeDevice)
	}
	rep := guardReportIn(t, e, ephemeralNS, "eph-0")
	if got := fakes(rep); len(got) != 1 || got[0] != "/dev/scratch" {
		t.Errorf("guard should report /dev/scratch as fake, reported %v (%+v)", got, rep.Devices)
	}
	view, err := execIn(e, ephemeralNS, "eph-0", "app", "ls", filepath.Join(config.Default().Helper.MountPath, contract.FilteredDevDir))
	if err != nil || strings.TrimSpace(view) != "" {
		t.Errorf("filtered view should be empty (the only device is fake), got %q (%v)", view, err)
	}
	t.Logf("loop devices with the fake (512 bytes = 1 sector):\n%s", loopsTable(t))

	// The pod goes, its claim with it (garbage collector), the PV is deleted: the fake is retired.
	if err := cs.CoreV1().Pods(ephemeralNS).Delete(ctx, "eph-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the pod and its ephemeral claim to be gone", func() (bool, string) {
		if _, err := cs.CoreV1().Pods(ephemeralNS).Get(ctx, "eph-0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, "pod still there"
		}
		if _, err := cs.CoreV1().PersistentVolumeClaims(ephemeralNS).Get(ctx, pvc.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, "claim still there"
		}
		return true, ""
	})
	if err := cs.CoreV1().PersistentVolumes().Delete(ctx, pvName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the fake to be retired (link, loop device, image)", func() (bool, string) {
		if _, err := os.Lstat(d.Link()); !errors.Is(err, fs.ErrNotExist) {
			return false, "the fake's link still stands at " + d.Link()
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
	t.Logf("RESULT lost local disk, generic ephemeral volume: pod Running on the 512-byte fake %s (%s) %s after its creation; fake retired after the pod and PV went",
		fake, pvName, onFake.Round(100*time.Millisecond))
}

// ephemeralPod is pod eph-0 with one generic ephemeral local block volume "scratch" at
// /dev/scratch, from the local class.
func ephemeralPod(image string) *corev1.Pod {
	block := corev1.PersistentVolumeBlock
	class := localClass()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "eph-0"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "app", Image: image, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
				VolumeDevices: []corev1.VolumeDevice{{Name: "scratch", DevicePath: "/dev/scratch"}},
			}},
			Volumes: []corev1.Volume{{Name: "scratch", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{
				VolumeClaimTemplate: &corev1.PersistentVolumeClaimTemplate{Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, StorageClassName: &class, VolumeMode: &block,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: *resource.NewQuantity(diskSize, resource.BinarySI)}},
				}},
			}}}},
		},
	}
}
