//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"net"
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

	"github.com/pvrescue/pvrescue/e2e/disks"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// Claims a tenant writes, naming what is not theirs (issue 32, item 5). The agent and the webhook
// count a claim only when it is Bound and the PV's claimRef names it (namespace, name, uid), and
// classify a volume as S3 from the PV's own CSI driver only.
//
// Attack 1, a foreign local PV: the victim's Bound local block PV loses its disk while a tenant's
// Pending claim names that PV in spec.volumeName; two tenant pods on the node use the claim, one
// opted in (the webhook's answer is recorded) and one opted out carrying the victim's guard init
// container copied verbatim. The victim still gets its 512-byte fake and runs; the agent makes
// nothing for the tenant and says nothing in the tenant's namespace (an Event there would tell the
// tenant the victim's PV and disk path).
//
// Attack 2, an S3 provisioner annotation over another driver's PV: a claim annotated
// volume.kubernetes.io/storage-provisioner (and the beta key) with the S3 driver's name, of the S3
// StorageClass, bound both ways to a PV of another CSI driver (the test plugin registered as
// foreignDriver). The webhook adds no livenessProbe and no propagation to its pod, the agent exports
// no series naming it, and when its s3fs is killed the agent leaves the dead mount alone — while a
// control pod in the same namespace on a csi-s3 PV is probed, exported and restored.

const (
	foreignVictimNS = "e2e-foreign-victim"
	foreignTenantNS = "e2e-foreign-tenant"
	foreignVictimPV = "e2e-foreign-victim-pv"
	// /dev/loop408 (testenv.TestLoops), after LostLocalDiskProvisionerLayout's 404..407.
	foreignDiskMinor = 408

	foreignS3NS   = "e2e-foreign-s3"
	foreignCtlPV  = "e2e-foreign-s3-ctl"
	foreignOthPV  = "e2e-foreign-s3-other"
	foreignDriver = "other.e2e.pvrescue.io"
	// betaStorageProvisioner is the beta key the PV controller still writes beside the GA one.
	betaStorageProvisioner = "volume.beta.kubernetes.io/storage-provisioner"
)

func foreignClaims(t *testing.T, e *env) {
	t.Run("ForeignLocalPV", func(t *testing.T) { foreignLocalPV(t, e) })
	t.Run("S3AnnotationOverOtherDriver", func(t *testing.T) { foreignS3Annotation(t, e) })
}

// blockPod is a pod of one container with claim "data" as /dev/data1.
func blockPod(name, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "app", Image: image, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
				VolumeDevices: []corev1.VolumeDevice{{Name: "data", DevicePath: "/dev/data1"}},
			}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"},
			}}},
		},
	}
}

// agentEvents lists the Events the agent wrote in ns, as "object reason: message".
func agentEvents(t testing.TB, e *env, ns string) []string {
	t.Helper()
	evs, err := e.c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list events in %s: %v", ns, err)
	}
	var out []string
	for _, ev := range evs.Items {
		if ev.Source.Component == contract.AgentComponent || ev.ReportingController == contract.AgentComponent {
			out = append(out, fmt.Sprintf("%s/%s %s: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message))
		}
	}
	return out
}

func foreignLocalPV(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	class := localClass()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc,
	}, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create storageclass: %v", err)
	}
	d, err := disks.Make(filepath.Join(e.c.Opts.WorkDir, "disks"), "foreign", foreignDiskMinor, diskSize)
	if err != nil {
		t.Fatalf("make the victim's disk: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Remove(); err != nil {
			t.Errorf("cleanup: remove the victim's disk: %v", err)
		}
	})
	// Cleanups run last first: the namespaces (claims, pods) go, then the PV, then the disk.
	deletePVAtCleanup(t, e, foreignVictimPV)
	fuseNamespace(t, e, foreignVictimNS, true)
	fuseNamespace(t, e, foreignTenantNS, true)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("on failure: PV events and the agent's log\n%s", agentDiagnostics(cs, map[string]*disks.Disk{foreignVictimPV: d}))
		}
	})
	createLocalBlockPV(t, cs, foreignVictimPV, d.Link(), e.c.Opts.NodeName, "", "")
	claim := func(ns string) *corev1.PersistentVolumeClaim { return localBlockClaim(ns, "data", foreignVictimPV) }
	if _, err := cs.CoreV1().PersistentVolumeClaims(foreignVictimNS).Create(ctx, claim(foreignVictimNS), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the victim's claim: %v", err)
	}
	var victimClaim *corev1.PersistentVolumeClaim
	waitFor(t, time.Minute, "the victim's claim to be Bound", func() (bool, string) {
		victimClaim, err = cs.CoreV1().PersistentVolumeClaims(foreignVictimNS).Get(ctx, "data", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return victimClaim.Status.Phase == corev1.ClaimBound, "phase " + string(victimClaim.Status.Phase)
	})
	if _, err := cs.CoreV1().Pods(foreignVictimNS).Create(ctx, blockPod("victim", e.c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the victim's pod: %v", err)
	}
	victim := framework.WaitPod(t, cs, foreignVictimNS, "victim", 3*time.Minute, "Running on its real disk", framework.Running)
	var guard *corev1.Container
	for i := range victim.Spec.InitContainers {
		if victim.Spec.InitContainers[i].Name == contract.GuardContainerName {
			guard = victim.Spec.InitContainers[i].DeepCopy()
		}
	}
	if guard == nil {
		t.Fatalf("no %s init container in the victim's pod: the webhook did not guard it\n%s", contract.GuardContainerName, framework.DescribePod(cs, victim))
	}

	// The tenant, while the victim's disk is still there: a claim that names the victim's PV but
	// no provisioner serves (it stays Pending), and two pods placed on the node by spec.nodeName
	// (never stuck in scheduling).
	tc := claim(foreignTenantNS)
	noClass := "e2e-foreign-unserved"
	tc.Spec.StorageClassName = &noClass
	if _, err := cs.CoreV1().PersistentVolumeClaims(foreignTenantNS).Create(ctx, tc, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the tenant's claim: %v", err)
	}
	optIn := blockPod("tenant-optin", e.c.BusyboxImage)
	optIn.Spec.NodeName = e.c.Opts.NodeName
	copied := blockPod("tenant-copied-guard", e.c.BusyboxImage)
	copied.Spec.NodeName = e.c.Opts.NodeName
	copied.Labels = map[string]string{contract.LabelInject: contract.LabelInjectOptOutVal}
	copied.Spec.InitContainers = []corev1.Container{*guard}
	for _, m := range guard.VolumeMounts {
		copied.Spec.Volumes = append(copied.Spec.Volumes, corev1.Volume{Name: m.Name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	for _, p := range []*corev1.Pod{optIn, copied} {
		if _, err := cs.CoreV1().Pods(foreignTenantNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create the tenant's pod %s: %v", p.Name, err)
		}
	}
	tenantPods := map[string]*corev1.Pod{}
	for _, name := range []string{optIn.Name, copied.Name} {
		p, err := cs.CoreV1().Pods(foreignTenantNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tenantPods[name] = p
	}
	// Premises: without them the checks below would pass for nothing.
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, foreignVictimPV, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ref := pv.Spec.ClaimRef; ref == nil || ref.Namespace != foreignVictimNS || ref.Name != "data" || ref.UID != victimClaim.UID || pv.Status.Phase != corev1.VolumeBound {
		t.Fatalf("premise: PV %s should be Bound with claimRef %s/data uid %s, has phase %s claimRef %+v", foreignVictimPV, foreignVictimNS, victimClaim.UID, pv.Status.Phase, pv.Spec.ClaimRef)
	}
	tenantClaim, err := cs.CoreV1().PersistentVolumeClaims(foreignTenantNS).Get(ctx, "data", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if tenantClaim.Status.Phase != corev1.ClaimPending || tenantClaim.Spec.VolumeName != foreignVictimPV {
		t.Fatalf("premise: the tenant's claim should be Pending with volumeName %s, is %s with volumeName %q", foreignVictimPV, tenantClaim.Status.Phase, tenantClaim.Spec.VolumeName)
	}
	for _, p := range tenantPods {
		if p.Spec.NodeName != e.c.Opts.NodeName || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			t.Fatalf("premise: tenant pod %s should be live on node %s, is %s on %q", p.Name, e.c.Opts.NodeName, p.Status.Phase, p.Spec.NodeName)
		}
	}
	if !hasInit(tenantPods[copied.Name], contract.GuardContainerName) || len(tenantPods[copied.Name].Spec.InitContainers) != 1 {
		t.Fatalf("premise: %s should carry exactly the copied guard, has %v", copied.Name, tenantPods[copied.Name].Spec.InitContainers)
	}
	t.Logf("premises hold: PV %s Bound, claimRef %s/%s uid %s; tenant claim %s/data %s with volumeName %s; tenant pods on %s: %s (guard injected: %v, status %s), %s (opted out, copied guard)",
		foreignVictimPV, pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name, pv.Spec.ClaimRef.UID, foreignTenantNS, tenantClaim.Status.Phase, tenantClaim.Spec.VolumeName,
		e.c.Opts.NodeName, optIn.Name, hasInit(tenantPods[optIn.Name], contract.GuardContainerName), tenantPods[optIn.Name].Annotations[contract.AnnotationStatus], copied.Name)
	// The webhook answered the tenant's pod (its status says why the volume was skipped), and
	// that answer — also the tenant's admission warning — names nothing of the victim's claim.
	status := tenantPods[optIn.Name].Annotations[contract.AnnotationStatus]
	if status == "" {
		t.Errorf("premise: the webhook wrote no %s on %s: it did not see the pod", contract.AnnotationStatus, optIn.Name)
	}
	if strings.Contains(status, foreignVictimNS+"/") || strings.Contains(status, string(victimClaim.UID)) {
		t.Errorf("the webhook told the tenant whose claim %s is bound to: %s", foreignVictimPV, status)
	}
	// The agent lists the tenant's pods before the disk goes: a fake made while only the victim's
	// guarded pod used the PV would stand whatever came after. Two of its passes end (one began
	// after the tenant's pods were there), then no fake may stand.
	took := waitPasses(t, e, localDiskPasses, 2, time.Minute)
	if l := loopsUnder(config.Default().StateDir); len(l) > 0 {
		t.Fatalf("premise: no fake of the agent before the disk is lost, found %v", l)
	}
	t.Logf("the agent made two local-disk passes (%s) with the tenant's pods in place and no fake", took.Round(100*time.Millisecond))

	t.Logf("unplugging %s (%s, PV %s) and deleting the victim's pod", d.Link(), d.Dev, foreignVictimPV)
	if err := d.Unplug(); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(foreignVictimNS).Delete(ctx, "victim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	if _, err := cs.CoreV1().Pods(foreignVictimNS).Create(ctx, blockPod("victim-2", e.c.BusyboxImage), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the victim's new pod: %v", err)
	}
	framework.WaitPod(t, cs, foreignVictimNS, "victim-2", 3*time.Minute, "Running on the agent's fake", framework.Running)
	onFake := time.Since(t0).Round(100 * time.Millisecond)
	pv, err = cs.CoreV1().PersistentVolumes().Get(ctx, foreignVictimPV, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dev := pv.Annotations[contract.AnnotationFakeDevice]
	var minor int
	if _, err := fmt.Sscanf(dev, "/dev/loop%d", &minor); err != nil || minor < 101 {
		t.Errorf("PV %s should be annotated %s with the agent's loop device (/dev/loop101 up), got %q", foreignVictimPV, contract.AnnotationFakeDevice, dev)
	}
	if got, err := os.Readlink(d.Link()); err != nil || got != dev {
		t.Errorf("the fake should be linked at %s -> %s, got %q (%v)", d.Link(), dev, got, err)
	}
	size, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "size"))
	if err != nil || strings.TrimSpace(string(size)) != "1" {
		t.Errorf("the fake %s should be 512 bytes (1 sector), /sys/block/%s/size = %q (%v)", dev, filepath.Base(dev), size, err)
	}
	if rep := guardReportIn(t, e, foreignVictimNS, "victim-2"); len(fakes(rep)) != 1 || fakes(rep)[0] != "/dev/data1" {
		t.Errorf("the victim's guard should report /dev/data1 as fake, reported %+v", rep.Devices)
	}
	// Two agent passes with the tenant's pods and the fake in place (one began after the victim's
	// pod ran on it), and the Events they recorded sent (eventSendSlack), then what
	// it made and said.
	waitPasses(t, e, localDiskPasses, 2, time.Minute)
	time.Sleep(eventSendSlack)
	if l := loopsUnder(config.Default().StateDir); len(l) != 1 {
		t.Errorf("the agent should hold exactly one fake (the victim's), has %v", l)
	}
	if evs := agentEvents(t, e, foreignTenantNS); len(evs) > 0 {
		t.Errorf("the agent wrote Events in the tenant's namespace %s (naming %s or %s?): %v", foreignTenantNS, foreignVictimPV, d.Link(), evs)
	}
	var created int
	for _, ev := range agentEvents(t, e, metav1.NamespaceDefault) {
		if !strings.HasPrefix(ev, "PersistentVolume/"+foreignVictimPV+" ") {
			continue
		}
		if strings.Contains(ev, contract.ReasonFakeDeviceCreated) {
			created++
		}
		if strings.Contains(ev, "without the pvrescue guard") {
			t.Errorf("the agent counted a tenant pod as an unguarded user of %s: %s", foreignVictimPV, ev)
		}
	}
	if created != 1 {
		t.Errorf("want one %s Event on PV %s, got %d", contract.ReasonFakeDeviceCreated, foreignVictimPV, created)
	}
	t.Logf("pods of the tenant:\n%s", framework.PodTable(cs, foreignTenantNS))
	t.Logf("loop devices with the victim's fake:\n%s", loopsTable(t))
	t.Logf("RESULT foreign local PV: the victim's pod Running on the 512-byte fake %s (at %s) %s after its creation, with a Pending tenant claim naming %s and two tenant pods on the node (opted in; opted out with a copied guard); agent fakes %v, agent Events in %s: none",
		dev, d.Link(), onFake, foreignVictimPV, loopsUnder(config.Default().StateDir), foreignTenantNS)

	// Hand the disk back and retire the fake, so the scenarios after this one find no fake of ours.
	for _, ns := range []string{foreignTenantNS, foreignVictimNS} {
		if err := cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			t.Fatalf("delete the pods of %s: %v", ns, err)
		}
	}
	if err := d.Plug(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "the victim's fake to be retired once the disk is back", func() (bool, string) {
		pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, foreignVictimPV, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		if v := pv.Annotations[contract.AnnotationFakeDevice]; v != "" {
			return false, "PV still annotated " + v
		}
		if l := loopsUnder(config.Default().StateDir); len(l) > 0 {
			return false, "loop devices still backed by the agent's images: " + strings.Join(l, ", ")
		}
		return true, ""
	})
}

// agentMetricsBody is the running agent's /metrics text.
func agentMetricsBody(t testing.TB, e *env) string {
	t.Helper()
	agent, why := runningAgent(e)
	if agent == nil {
		t.Fatal(why)
	}
	ok, body := httpGet("http://" + net.JoinHostPort(agent.Status.PodIP, "8080") + "/metrics")
	if !ok {
		t.Fatalf("the agent's metrics: %s", body)
	}
	return body
}

// seriesNaming lists the pvrescue_* series of body whose labels hold any of needles.
func seriesNaming(body string, needles ...string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, "pvrescue_") {
			continue
		}
		for _, n := range needles {
			if strings.Contains(l, n) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// s3fsAt lists the host's s3fs processes mounting at target.
func s3fsAt(target string) []int {
	return procs("s3fs", func(_, _ int, cmd []byte) bool {
		return strings.Contains(string(cmd), "\x00"+target+"\x00")
	})
}

func foreignS3Annotation(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	keys := config.Default().S3
	if !config.Default().IsS3Driver(e.csi.Driver) || config.Default().IsS3Driver(foreignDriver) {
		t.Fatalf("premise: %s should be a configured S3 driver and %s not one (s3.drivers %v)", e.csi.Driver, foreignDriver, keys.Drivers)
	}
	other := sibling(t, e, foreignDriver, csitest.LayoutPlain)
	t.Logf("the test plugin registered again as %s (layout %s, DaemonSet %s/%s)", foreignDriver, csitest.LayoutPlain, stack.CSINamespace, other.Name())
	dir, err := e.s3.Bucket(s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{foreignCtlPV: "control on csi-s3\n", foreignOthPV: "on another driver\n"}
	prefix := map[string]string{foreignCtlPV: "foreign-ctl", foreignOthPV: "foreign-other"}
	for pvName, content := range want {
		putInBucket(t, e, prefix[pvName]+"/app.txt", content)
		t.Cleanup(func() { _ = os.RemoveAll(filepath.Join(dir, prefix[pvName])) })
	}
	for _, pvName := range []string{foreignCtlPV, foreignOthPV} {
		deletePVAtCleanup(t, e, pvName) // after the namespace (cleanups run last first)
	}
	fuseNamespace(t, e, foreignS3NS, true)
	logAgentOnFailure(t, e, foreignCtlPV, foreignOthPV, foreignDriver)
	if _, err := cs.CoreV1().Secrets(foreignS3NS).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3-creds"},
		StringData: map[string]string{keys.SecretKeys.AccessKeyID: e.s3.AccessKey, keys.SecretKeys.SecretAccessKey: e.s3.SecretKey, keys.SecretKeys.Endpoint: e.s3.Endpoint},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create secret: %v", err)
	}
	bind := storagev1.VolumeBindingImmediate
	retain := corev1.PersistentVolumeReclaimRetain
	if _, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: s3Class}, Provisioner: e.csi.Driver, ReclaimPolicy: &retain, VolumeBindingMode: &bind,
	}, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatalf("create storageclass: %v", err)
	}
	class := s3Class
	claims := map[string]string{foreignCtlPV: "ctl", foreignOthPV: "other"}
	drivers := map[string]string{foreignCtlPV: e.csi.Driver, foreignOthPV: foreignDriver}
	for _, pvName := range []string{foreignCtlPV, foreignOthPV} {
		if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: pvName},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
				PersistentVolumeReclaimPolicy: retain,
				StorageClassName:              class,
				ClaimRef:                      &corev1.ObjectReference{Namespace: foreignS3NS, Name: claims[pvName]},
				PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
					Driver: drivers[pvName], VolumeHandle: s3Bucket + "/" + prefix[pvName],
					VolumeAttributes:     map[string]string{keys.Parameters.Bucket: s3Bucket, keys.Parameters.Prefix: prefix[pvName], keys.Parameters.Endpoint: e.s3.Endpoint, "mounter": "s3fs"},
					NodePublishSecretRef: &corev1.SecretReference{Name: "s3-creds", Namespace: foreignS3NS},
				}},
			},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create PV %s: %v", pvName, err)
		}
		pvc := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: claims[pvName]},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: &class, VolumeName: pvName,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}
		if pvName == foreignOthPV {
			// What the PV controller writes when the S3 driver provisions: here written by the tenant.
			pvc.Annotations = map[string]string{"volume.kubernetes.io/storage-provisioner": e.csi.Driver, betaStorageProvisioner: e.csi.Driver}
		}
		if _, err := cs.CoreV1().PersistentVolumeClaims(foreignS3NS).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create claim %s: %v", pvc.Name, err)
		}
	}
	// Premises: both claims Bound both ways; the annotations name the S3 driver, the PV another.
	for _, pvName := range []string{foreignCtlPV, foreignOthPV} {
		waitFor(t, time.Minute, "claim "+claims[pvName]+" and PV "+pvName+" bound both ways", func() (bool, string) {
			pvc, err := cs.CoreV1().PersistentVolumeClaims(foreignS3NS).Get(ctx, claims[pvName], metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, pvName, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			ref := pv.Spec.ClaimRef
			if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName != pvName || ref == nil || ref.UID != pvc.UID {
				return false, fmt.Sprintf("claim %s volumeName %q, PV %s claimRef %+v", pvc.Status.Phase, pvc.Spec.VolumeName, pv.Status.Phase, ref)
			}
			return true, ""
		})
	}
	oth, err := cs.CoreV1().PersistentVolumeClaims(foreignS3NS).Get(ctx, claims[foreignOthPV], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"volume.kubernetes.io/storage-provisioner", betaStorageProvisioner} {
		if v := oth.Annotations[k]; !config.Default().IsS3Driver(v) {
			t.Fatalf("premise: claim %s should be annotated %s with the S3 driver, has %q", oth.Name, k, v)
		}
	}
	t.Logf("premises hold: claim %s/%s (annotated %s=%s, class %s) Bound both ways to PV %s of driver %s; claim ctl Bound to PV %s of driver %s",
		foreignS3NS, oth.Name, "volume.kubernetes.io/storage-provisioner", oth.Annotations["volume.kubernetes.io/storage-provisioner"], class, foreignOthPV, foreignDriver, foreignCtlPV, e.csi.Driver)

	pods := map[string]string{foreignCtlPV: "control", foreignOthPV: "foreign"}
	for _, pvName := range []string{foreignCtlPV, foreignOthPV} {
		p := plainPod(pods[pvName], e.c.BusyboxImage)
		p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = claims[pvName]
		if _, err := cs.CoreV1().Pods(foreignS3NS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s: %v", p.Name, err)
		}
	}
	targets := map[string]string{}
	running := map[string]*corev1.Pod{}
	for _, pvName := range []string{foreignCtlPV, foreignOthPV} {
		p := framework.WaitPod(t, cs, foreignS3NS, pods[pvName], 2*time.Minute, "Running", framework.Running)
		running[pvName] = p
		targets[pvName] = podTarget(e, string(p.UID), pvName)
		if ok, why := readFrom(e, foreignS3NS, p.Name, "app", "/data/app.txt", want[pvName]); !ok {
			t.Fatalf("cannot read before the kill: %s", why)
		}
	}
	// The webhook: the control is probed and gets HostToContainer; the foreign pod neither.
	probed := func(p *corev1.Pod) (bool, string) {
		prop := "<unset>"
		for _, m := range p.Spec.Containers[0].VolumeMounts {
			if m.Name == "data" && m.MountPropagation != nil {
				prop = string(*m.MountPropagation)
			}
		}
		return p.Spec.Containers[0].LivenessProbe != nil, prop
	}
	if ok, prop := probed(running[foreignCtlPV]); !ok || prop != string(corev1.MountPropagationHostToContainer) {
		t.Errorf("the control pod should have the injected livenessProbe and HostToContainer, has probe %v, propagation %s", ok, prop)
	}
	if ok, prop := probed(running[foreignOthPV]); ok || prop != "<unset>" {
		t.Errorf("the foreign pod (claim annotated with %s over a %s PV) was handled as S3 by the webhook: probe %v, propagation %s; status %s",
			e.csi.Driver, foreignDriver, ok, prop, running[foreignOthPV].Annotations[contract.AnnotationStatus])
	}
	t.Logf("webhook status: control %s; foreign %s", running[foreignCtlPV].Annotations[contract.AnnotationStatus], running[foreignOthPV].Annotations[contract.AnnotationStatus])

	// The agent watches the control (its series is there), and nothing of the foreign volume.
	healthy := fmt.Sprintf(`pvrescue_s3_mount_healthy{namespace=%q,pod="control",pv=%q} 1`, foreignS3NS, foreignCtlPV)
	waitFor(t, 30*time.Second, "the agent to export the control's volume as healthy", func() (bool, string) {
		body := agentMetricsBody(t, e)
		return strings.Contains(body, healthy), "series: " + strings.Join(seriesNaming(body, foreignCtlPV), "; ")
	})
	foreignNeedles := []string{`"` + foreignOthPV + `"`, `pod="foreign"`, `"` + claims[foreignOthPV] + `"`}
	if s := seriesNaming(agentMetricsBody(t, e), foreignNeedles...); len(s) > 0 {
		t.Errorf("the agent exports series naming the foreign volume: %v", s)
	}

	// Kill both volumes' s3fs: the control's is restored, the foreign one is left dead.
	killed := map[string][]int{}
	for _, pvName := range []string{foreignCtlPV, foreignOthPV} {
		pids := s3fsAt(targets[pvName])
		if len(pids) != 1 {
			t.Fatalf("want one s3fs at %s before the kill, found %v", targets[pvName], pids)
		}
		killed[pvName] = pids
	}
	foreignStack := describeStack(mountsAt(targets[foreignOthPV]))
	t0 := time.Now()
	for _, pvName := range []string{foreignCtlPV, foreignOthPV} {
		if err := syscall.Kill(killed[pvName][0], syscall.SIGKILL); err != nil {
			t.Fatalf("kill s3fs %d of %s: %v", killed[pvName][0], pvName, err)
		}
	}
	const after = "put on the S3 server's side after the kill\n"
	for _, pvName := range []string{foreignCtlPV, foreignOthPV} {
		putInBucket(t, e, prefix[pvName]+"/after.txt", after)
	}
	at := rescueReads(t, e, t0, 90*time.Second, "from the control after its s3fs was killed", []*stack.CSI{e.csi},
		reader{foreignS3NS, "control", "app", "/data/after.txt", after})
	// The agent restored the control; two more of its S3 passes end (one began after the
	// control read again: a restore of the foreign volume would have started beside the
	// control's, in the pass the deaths woke, and run as long) and the Events they recorded are
	// sent (eventSendSlack).
	looked := waitS3Passes(t, e, 2, 3*time.Minute)
	time.Sleep(eventSendSlack)
	t.Logf("the agent made two S3 passes (%s) after the control read again", looked.Round(100*time.Millisecond))
	if ok, _ := readFrom(e, foreignS3NS, "foreign", "app", "/data/after.txt", after); ok {
		t.Errorf("the foreign volume (driver %s) answers again after its s3fs was killed: someone restored it; stack %s", foreignDriver, describeStack(mountsAt(targets[foreignOthPV])))
	}
	_, readErr := execIn(e, foreignS3NS, "foreign", "app", "cat", "/data/app.txt")
	if now := describeStack(mountsAt(targets[foreignOthPV])); now != foreignStack {
		t.Errorf("the mounts at the foreign pod's target changed after the kill: %s → %s", foreignStack, now)
	}
	if ours := ourS3fs(foreignOthPV); len(ours) > 0 {
		t.Errorf("the agent runs s3fs %v for the foreign volume", ours)
	}
	if s := seriesNaming(agentMetricsBody(t, e), foreignNeedles...); len(s) > 0 {
		t.Errorf("after the kill the agent exports series naming the foreign volume: %v", s)
	}
	var ctlEvents []string
	for _, ev := range agentEvents(t, e, foreignS3NS) {
		if strings.Contains(ev, "/foreign ") || strings.Contains(ev, foreignOthPV) {
			t.Errorf("the agent wrote an Event about the foreign volume: %s", ev)
		}
		if strings.HasPrefix(ev, "Pod/control ") {
			ctlEvents = append(ctlEvents, ev)
		}
	}
	if len(ctlEvents) == 0 {
		t.Errorf("the agent wrote no Event about restoring the control pod's volume")
	}
	t.Logf("agent Events about the control: %v", ctlEvents)
	t.Logf("RESULT S3 annotation over another driver's PV: control (csi-s3) probed, exported healthy, s3fs %v killed and read again after %s; foreign (%s, claim annotated %s) not probed, no series, s3fs %v killed and left dead (%v), stack %s unchanged, no Event",
		killed[foreignCtlPV], at[foreignS3NS+"/control/app"], foreignDriver, e.csi.Driver, killed[foreignOthPV], readErr, foreignStack)
}
