//go:build e2e

package scenarios

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/disks"
	"github.com/pvrescue/pvrescue/e2e/framework"
	"github.com/pvrescue/pvrescue/e2e/stack"
	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

const (
	hostileNS      = "e2e-hostile"
	hostilePV      = "e2e-hostile-pv"
	hostilePlainNS = "e2e-hostile-plain"
	hostileDiskPV  = "e2e-hostile-disk"
	// Bucket-root names no container may ever see: each shows only its own subdirectory.
	hostileRootFile = "hostile-root-secret.txt"
	hostileRootDir  = "hostile-other-tenant"
)

// hostileMount is one read-only container of the tenant's pod: mountPath and subPath hold bytes
// the kernel does not escape in mountinfo (U+00A0, \r, \v, U+0085).
type hostileMount struct {
	container, mountPath, subPath string
	prop                          *corev1.MountPropagationMode
	marker                        string
}

func hostileMounts() []hostileMount {
	h2c, none := corev1.MountPropagationHostToContainer, corev1.MountPropagationNone
	return []hostileMount{
		// HostToContainer chosen by the tenant on a read-only mount (the webhook keeps a value set).
		{container: "ro-h2c", mountPath: "/m\u00a0rw\r\v\u0085", subPath: "\u00a0/data\u00a0rw", prop: &h2c, marker: "marker of ro-h2c\n"},
		// Propagation unset: the webhook leaves read-only S3 mounts without HostToContainer.
		{container: "ro-sub", mountPath: "/data\u00a0rw\r", subPath: "\u0085/sub\u00a0rw", marker: "marker of ro-sub\n"},
		// None chosen explicitly, mountPath ending in \v and U+0085.
		{container: "ro-none", mountPath: "/d\u00a0\v\u0085", subPath: "x\u00a0rw/\u0085y", prop: &none, marker: "marker of ro-none\n"},
	}
}

// hostileTenant: a tenant's read-only subPath mounts named with unescaped mountinfo bytes → after
// the volume's s3fs is killed and restored, each container still sees only its subdirectory and
// gets EROFS on a write, or was skipped with a ContainerMountSkipped Event naming it; a pod with a
// copied status annotation in an unlabelled namespace over a missing local disk gets no fake and
// an UnguardedPodOnMissingDisk Event.
func hostileTenant(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	ms := hostileMounts()
	for _, m := range ms {
		putInBucket(t, e, filepath.Join(m.subPath, "marker.txt"), m.marker)
	}
	putInBucket(t, e, hostileRootFile, "the bucket root: no container of the tenant may see this\n")
	putInBucket(t, e, filepath.Join(hostileRootDir, "secret.txt"), "another tenant's directory\n")
	bucket, err := e.s3.Bucket(s3Bucket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, p := range []string{hostileRootFile, hostileRootDir, "\u00a0", "\u0085", "x\u00a0rw"} {
			_ = os.RemoveAll(filepath.Join(bucket, p))
		}
	})

	fuseNamespace(t, e, hostileNS, true)
	keys := config.Default().S3
	s3Volume(t, e, s3Vol{ns: hostileNS, pv: hostilePV, driver: e.csi.Driver, handle: s3Bucket + "-hostile",
		attrs: map[string]string{keys.Parameters.Bucket: s3Bucket, keys.Parameters.Endpoint: e.s3.Endpoint, "mounter": "s3fs"}})
	deletePVAtCleanup(t, e, hostilePV)
	logAgentOnFailure(t, e, hostilePV, "hostile")

	loop := []string{"sh", "-c", "while true; do sleep 1; done"}
	var cts []corev1.Container
	for _, m := range ms {
		cts = append(cts, corev1.Container{Name: m.container, Image: e.c.BusyboxImage, Command: loop, VolumeMounts: []corev1.VolumeMount{{
			Name: "data", MountPath: m.mountPath, SubPath: m.subPath, ReadOnly: true, MountPropagation: m.prop,
		}}})
	}
	if _, err := cs.CoreV1().Pods(hostileNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: cts, Volumes: dataVolume(),
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the tenant's pod: %v", err)
	}
	pod := framework.WaitPod(t, cs, hostileNS, "tenant", 2*time.Minute, "Running", framework.Running)
	status := pod.Annotations[contract.AnnotationStatus]
	if status == "" {
		t.Fatalf("the webhook did not mutate the tenant's pod (no %s annotation): %v", contract.AnnotationStatus, pod.Annotations)
	}
	for _, c := range pod.Spec.Containers {
		for _, vm := range c.VolumeMounts {
			if vm.Name == "data" {
				prop := "<unset>"
				if vm.MountPropagation != nil {
					prop = string(*vm.MountPropagation)
				}
				t.Logf("container %s: mountPath %q subPath %q readOnly %t mountPropagation %s", c.Name, vm.MountPath, vm.SubPath, vm.ReadOnly, prop)
			}
		}
	}
	for _, m := range ms {
		checkHostileView(t, e, m, []string{"marker.txt"}, "before the kill")
		checkHostileWrite(t, e, m, "before the kill")
	}

	// The copied annotation's pod starts now: the agent sees it while the S3 rescue runs.
	diskPath := filepath.Join(disks.ByIDDir, disks.LinkPrefix+"hostile-missing")
	loopsBefore := loopsUnder(config.Default().StateDir)
	copiedPod := copiedAnnotationPod(t, e, diskPath, status)

	var target []int
	for _, pid := range pluginS3fs(e.csi) {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmd), hostilePV) {
			target = append(target, pid)
		}
	}
	if len(target) != 1 {
		t.Fatalf("want exactly one s3fs of the plugin serving %s, found %v (plugin s3fs: %v)", hostilePV, target, pluginS3fs(e.csi))
	}
	tgt := podTarget(e, string(pod.UID), hostilePV)
	witness := witnessKill(t, e, []*corev1.Pod{pod}, []string{tgt}, target)
	t0 := time.Now()
	if err := syscall.Kill(target[0], syscall.SIGKILL); err != nil {
		t.Fatalf("kill s3fs %d: %v", target[0], err)
	}
	const rescued = "put on the S3 server's side after the kill\n"
	for _, m := range ms {
		putInBucket(t, e, filepath.Join(m.subPath, "rescued.txt"), rescued)
	}

	// Each container either reads the rescued file in its own subdirectory or is named by a
	// ContainerMountSkipped Event; every round also checks that none sees the bucket root.
	outcome := map[string]string{}
	var why []string
	ok := pollFor(75*time.Second, func() bool {
		why = why[:0]
		skipped := events(t, e, hostileNS, containermount.ReasonSkipped)
		for _, m := range ms {
			if ls, err := execIn(e, hostileNS, "tenant", m.container, "ls", "-A", m.mountPath); err == nil && seesRoot(ls) {
				t.Errorf("%s sees the bucket root at %q after the kill: %q", m.container, m.mountPath, ls)
			}
			if outcome[m.container] != "" {
				continue
			}
			if out, err := execIn(e, hostileNS, "tenant", m.container, "cat", m.mountPath+"/rescued.txt"); err == nil && out == rescued {
				outcome[m.container] = fmt.Sprintf("remounted after %s", time.Since(t0).Round(100*time.Millisecond))
				continue
			}
			for _, ev := range skipped {
				if strings.Contains(ev, m.container) {
					outcome[m.container] = "skipped: " + ev
				}
			}
			if outcome[m.container] == "" {
				why = append(why, m.container+" neither reads rescued.txt nor was named by a "+containermount.ReasonSkipped+" Event")
			}
		}
		return len(why) == 0
	})
	if !ok {
		t.Logf("events of %s: %s", hostileNS, strings.Join(events(t, e, hostileNS, ""), "\n  "))
		t.Fatalf("timed out after 75 s after the kill: %s", strings.Join(why, "; "))
	}
	// The kill must have killed the volume: checked after the rescue (the killed s3fs gone,
	// another mount serving the target, the agent's record of the restore), never by a stat
	// right after the kill, which the agent's rescue may already have answered.
	if contains(pluginS3fs(e.csi), target[0]) {
		t.Errorf("the killed s3fs %d still runs", target[0])
	}
	t.Logf("RESULT hostile tenant: the kill killed the volume: %s", witness.checkVolumeDied(t, e))
	t.Logf("stack at the target after the rescue: %s", describeStack(mountsAt(tgt)))
	t.Logf("%s Events: %v", containermount.ReasonRestored, events(t, e, hostileNS, containermount.ReasonRestored))
	remounted := 0
	for _, m := range ms {
		if strings.HasPrefix(outcome[m.container], "remounted") {
			remounted++
		}
	}
	if remounted == 0 {
		// Skipping every container would pass the checks below without restoring anything.
		t.Errorf("no container of the tenant was remounted (every one skipped: %v): the rescue restored nothing", outcome)
	}
	for _, m := range ms {
		if strings.HasPrefix(outcome[m.container], "remounted") {
			checkHostileView(t, e, m, []string{"marker.txt", "rescued.txt"}, "after the rescue")
			checkHostileWrite(t, e, m, "after the rescue")
		} else {
			checkHostileDead(t, e, m, "after the skip")
		}
		t.Logf("RESULT hostile tenant: container %s (mountPath %q, subPath %q): %s", m.container, m.mountPath, m.subPath, outcome[m.container])
	}
	for _, m := range ms {
		if left, _ := filepath.Glob(filepath.Join(bucket, "*", "probe-*")); len(left) > 0 {
			t.Errorf("a write of the tenant's read-only containers reached the bucket: %v", left)
		}
		if left, _ := filepath.Glob(filepath.Join(bucket, m.subPath, "probe-*")); len(left) > 0 {
			t.Errorf("a write of %s reached the bucket: %v", m.container, left)
		}
	}

	checkCopiedAnnotation(t, e, copiedPod, diskPath, loopsBefore)

	t.Run("Consent", func(t *testing.T) { hostileTenantConsent(t, e) })
}

// seesRoot reports whether a listing shows any bucket-root name.
func seesRoot(ls string) bool {
	for _, n := range strings.Fields(ls) {
		if n == hostileRootFile || n == hostileRootDir {
			return true
		}
	}
	return false
}

// checkHostileView checks that the container lists exactly want at its mountPath and reads its marker.
func checkHostileView(t *testing.T, e *env, m hostileMount, want []string, when string) {
	t.Helper()
	ls, err := execIn(e, hostileNS, "tenant", m.container, "ls", "-A", m.mountPath)
	got := strings.Fields(ls)
	sort.Strings(got)
	if err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("%s: %s lists %q at %q, want exactly %v (its subdirectory %q only) (%v)", when, m.container, got, m.mountPath, want, m.subPath, err)
	}
	if out, err := execIn(e, hostileNS, "tenant", m.container, "cat", m.mountPath+"/marker.txt"); err != nil || out != m.marker {
		t.Errorf("%s: %s reads %q from its marker, want %q (%v)", when, m.container, out, m.marker, err)
	}
}

// checkHostileWrite checks that a write at the container's mountPath fails with EROFS.
func checkHostileWrite(t *testing.T, e *env, m hostileMount, when string) {
	t.Helper()
	out, err := execIn(e, hostileNS, "tenant", m.container, "sh", "-c", `echo x > "$1/probe-$2"`, "sh", m.mountPath, m.container)
	switch {
	case err == nil:
		t.Errorf("%s: %s wrote into its read-only mount %q (%q)", when, m.container, m.mountPath, out)
	case !strings.Contains(err.Error(), "Read-only file system"):
		t.Errorf("%s: %s write at %q failed, but not with EROFS: %v", when, m.container, m.mountPath, err)
	}
}

// checkHostileDead checks a skipped container: no write succeeds and no bucket root shows.
func checkHostileDead(t *testing.T, e *env, m hostileMount, when string) {
	t.Helper()
	if ls, err := execIn(e, hostileNS, "tenant", m.container, "ls", "-A", m.mountPath); err == nil && seesRoot(ls) {
		t.Errorf("%s: skipped %s sees the bucket root at %q: %q", when, m.container, m.mountPath, ls)
	}
	if out, err := execIn(e, hostileNS, "tenant", m.container, "sh", "-c", `echo x > "$1/probe-$2"`, "sh", m.mountPath, m.container); err == nil {
		t.Errorf("%s: skipped %s wrote into its read-only mount %q (%q)", when, m.container, m.mountPath, out)
	}
}

// copiedAnnotationPod creates, in an unlabelled namespace, a local block PV at diskPath (missing),
// its claim, and a pod on it carrying status as its pvrescue.io/status annotation.
func copiedAnnotationPod(t *testing.T, e *env, diskPath, status string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	cs := e.c.Client
	if _, err := os.Lstat(diskPath); !os.IsNotExist(err) {
		t.Fatalf("%s should not exist before the scenario: %v", diskPath, err)
	}
	fuseNamespace(t, e, hostilePlainNS, false)
	createLocalBlockPV(t, cs, hostileDiskPV, diskPath, e.c.Opts.NodeName, hostilePlainNS, "disk")
	deletePVAtCleanup(t, e, hostileDiskPV)
	t.Cleanup(func() {
		// Nothing should be there; a link the agent made would outlive the cluster's disks.
		if fi, err := os.Lstat(diskPath); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			_ = os.Remove(diskPath)
		}
	})
	if _, err := cs.CoreV1().PersistentVolumeClaims(hostilePlainNS).Create(ctx, localBlockClaim(hostilePlainNS, "disk", hostileDiskPV), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pvc: %v", err)
	}
	p, err := cs.CoreV1().Pods(hostilePlainNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "copied", Annotations: map[string]string{contract.AnnotationStatus: status}},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "app", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
				VolumeDevices: []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/disk0"}},
			}},
			Volumes: []corev1.Volume{{Name: "disk", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "disk"},
			}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create the pod with the copied annotation: %v", err)
	}
	if hasInit(p, contract.GuardContainerName) || len(p.Spec.InitContainers) > 0 {
		t.Fatalf("the pod in the unlabelled namespace was mutated: init containers %v", p.Spec.InitContainers)
	}
	return p
}

// checkCopiedAnnotation checks that the agent did nothing for the pod with a copied status
// annotation in a namespace that did not opt in (consent: the agent acts only for opted-in
// namespaces, judged from the Namespace object): no Event of the agent on it, no link at the
// missing path, no loop of the agent's, no fake-device annotation, the pod not running — after
// two passes of the local rescue (one began after the pod was there) and the Events they
// recorded were sent (eventSendSlack), so the agent has passed over it.
func checkCopiedAnnotation(t *testing.T, e *env, p *corev1.Pod, diskPath string, loopsBefore []string) {
	t.Helper()
	ctx := context.Background()
	cs := e.c.Client
	looked := waitPasses(t, e, localDiskPasses, 2, time.Minute)
	time.Sleep(eventSendSlack)
	t.Logf("the agent made two local-disk passes (%s) with pod %s/%s in place", looked.Round(100*time.Millisecond), p.Namespace, p.Name)
	if evs := agentEvents(t, e, hostilePlainNS); len(evs) > 0 {
		t.Errorf("the agent wrote Events in %s, a namespace that did not opt in: %v", hostilePlainNS, evs)
	}
	if fi, err := os.Lstat(diskPath); !os.IsNotExist(err) {
		mode := "?"
		if fi != nil {
			mode = fi.Mode().String()
		}
		t.Errorf("something was made at the missing disk's path %s (%s, %v) for a pod with a copied annotation", diskPath, mode, err)
	}
	if now := loopsUnder(config.Default().StateDir); strings.Join(now, ",") != strings.Join(loopsBefore, ",") {
		t.Errorf("the agent's loop devices changed: %v → %v", loopsBefore, now)
	}
	pv, err := cs.CoreV1().PersistentVolumes().Get(ctx, hostileDiskPV, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := pv.Annotations[contract.AnnotationFakeDevice]; v != "" {
		t.Errorf("PV %s is annotated %s=%s: a fake was made for a pod with a copied annotation", hostileDiskPV, contract.AnnotationFakeDevice, v)
	}
	now, err := cs.CoreV1().Pods(hostilePlainNS).Get(ctx, "copied", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if framework.Running(now) {
		t.Errorf("the pod with the copied annotation runs without its disk\n%s", framework.DescribePod(cs, now))
	}
	t.Logf("RESULT hostile tenant: pod %s/copied (copied %s, namespace not opted in, missing disk %s): no fake, no link, loops unchanged %v, no Event of the agent",
		hostilePlainNS, contract.AnnotationStatus, diskPath, loopsBefore)
}

const (
	noConsentNS = "e2e-hostile-noconsent"
	noConsentPV = "e2e-hostile-noconsent-pv"
)

// hostileTenantConsent: consent. Beside an opted-in pod, a pod of a namespace that did not opt in
// (on its own PV of the same driver) and a pod labelled pvrescue.io/inject=false in the opted-in
// namespace (on the opted-in pod's own claim) lose their s3fs to a plugin restart. The opted-in
// pod reads the bucket again; the other two stay dead — no remount, no Event of the agent naming
// them, no metric series naming them.
func hostileTenantConsent(t *testing.T, e *env) {
	ctx := context.Background()
	cs := e.c.Client
	fuseNamespace(t, e, noConsentNS, false)
	keys := config.Default().S3
	s3Volume(t, e, s3Vol{ns: noConsentNS, pv: noConsentPV, driver: e.csi.Driver, handle: s3Bucket + "-noconsent",
		attrs: map[string]string{keys.Parameters.Bucket: s3Bucket, keys.Parameters.Endpoint: e.s3.Endpoint, "mounter": "s3fs"}})
	deletePVAtCleanup(t, e, noConsentPV)
	logAgentOnFailure(t, e, noConsentPV, hostilePV, "consent")
	putInBucket(t, e, "consent/marker.txt", "consent\n")
	t.Cleanup(func() {
		if bucket, err := e.s3.Bucket(s3Bucket); err == nil {
			_ = os.RemoveAll(filepath.Join(bucket, "consent"))
		}
	})

	pod := func(name string, lbl map[string]string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl},
			Spec: corev1.PodSpec{
				AutomountServiceAccountToken: ptr(false), TerminationGracePeriodSeconds: ptr(int64(1)),
				Containers: []corev1.Container{{Name: "app", Image: e.c.BusyboxImage, Command: []string{"sh", "-c", "while true; do sleep 1; done"},
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data", SubPath: "consent"}}}},
				Volumes: dataVolume(),
			},
		}
	}
	type consentPod struct {
		ns, name string
		lbl      map[string]string
		rescued  bool
	}
	pods := []consentPod{
		{hostileNS, "consent-in", nil, true},
		{hostileNS, "nocons-optout", map[string]string{contract.LabelInject: contract.LabelInjectOptOutVal}, false},
		{noConsentNS, "nocons-plain", nil, false},
	}
	uids := map[string]string{}
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(p.ns).Create(ctx, pod(p.name, p.lbl), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s/%s: %v", p.ns, p.name, err)
		}
	}
	for _, p := range pods {
		got := framework.WaitPod(t, cs, p.ns, p.name, 2*time.Minute, "Running", framework.Running)
		uids[p.name] = string(got.UID)
		if out, err := execIn(e, p.ns, p.name, "app", "cat", "/data/marker.txt"); err != nil || out != "consent\n" {
			t.Fatalf("%s/%s reads %q before the restart (%v)", p.ns, p.name, out, err)
		}
	}

	t.Logf("deleting the CSI plugin's pod: the s3fs of all three pods die with it")
	t0 := time.Now()
	oldPlugin, err := e.csi.Kill(ctx)
	if err != nil {
		t.Fatalf("delete the CSI plugin pod: %v", err)
	}
	const rescued = "put on the S3 server's side while the plugin was down\n"
	putInBucket(t, e, "consent/rescued.txt", rescued)
	if _, err := e.csi.WaitRegistered(ctx, oldPlugin); err != nil {
		t.Fatalf("the DaemonSet's new CSI plugin pod: %v", err)
	}
	at := rescueReads(t, e, t0, 90*time.Second, "by the opted-in pod", []*stack.CSI{e.csi},
		reader{ns: hostileNS, pod: "consent-in", container: "app", path: "/data/rescued.txt", want: rescued})
	t.Logf("RESULT consent: the opted-in pod %s/consent-in read the bucket again %s after the plugin was deleted", hostileNS, at[hostileNS+"/consent-in/app"])

	// The others stay dead: two more S3 passes of the agent end (one began after the opted-in
	// pod read again; a restore of theirs would have started beside the opted-in pod's, in the
	// pass the deaths woke) and the Events they recorded are sent (eventSendSlack),
	// then neither reads, nor did on the way.
	stillDead := func() {
		for _, p := range pods[1:] {
			out, err := execIn(e, p.ns, p.name, "app", "cat", "/data/marker.txt")
			if err == nil {
				t.Fatalf("%s/%s (no consent) reads %q after the plugin restart: the agent restored its mount", p.ns, p.name, out)
			}
			if !strings.Contains(err.Error(), "not connected") {
				t.Logf("%s/%s: read fails with %v", p.ns, p.name, err)
			}
		}
	}
	stillDead()
	looked := waitS3Passes(t, e, 2, 3*time.Minute)
	time.Sleep(eventSendSlack)
	stillDead()
	for _, p := range pods[1:] {
		if ms := mountsAt(podTarget(e, uids[p.name], map[string]string{hostileNS: hostilePV, noConsentNS: noConsentPV}[p.ns])); len(ms) > 1 {
			t.Errorf("%s/%s: %d mounts at its target, want only the driver's dead one: %s", p.ns, p.name, len(ms), describeStack(ms))
		}
	}
	if evs := agentEvents(t, e, noConsentNS); len(evs) > 0 {
		t.Errorf("the agent wrote Events in %s, which did not opt in: %v", noConsentNS, evs)
	}
	for _, ev := range agentEvents(t, e, hostileNS) {
		if strings.Contains(ev, "nocons-optout") {
			t.Errorf("the agent wrote an Event about the opted-out pod: %s", ev)
		}
	}
	if series := seriesNaming(agentMetricsBody(t, e), noConsentNS, noConsentPV, "nocons-optout", uids["nocons-optout"], uids["nocons-plain"]); len(series) > 0 {
		t.Errorf("the agent's metrics name the pods without consent: %v", series)
	}
	t.Logf("RESULT consent: %s/nocons-optout (labelled %s=%s) and %s/nocons-plain (namespace not opted in) stayed dead over two S3 passes of the agent (%s) after the opted-in pod's rescue: no remount, no Event, no series",
		hostileNS, contract.LabelInject, contract.LabelInjectOptOutVal, noConsentNS, looked.Round(100*time.Millisecond))
}
