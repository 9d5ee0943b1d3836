//go:build node

package s3mount_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/containermount/containermounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

const (
	nodeName = "node-1"
	driver   = "ru.yandex.s3.csi"
	bucket   = "bkt"
	ak       = "AKIATESTPVRESCUE"
	sk       = "sEcReTkEy-pvrescue-0123456789"
	ns       = "default"
)

// nodeEnv is one test's node: a versitygw S3 server, a kube-apiserver, a shared kubelet dir and
// the agent's state dir, all torn down (mounts and processes included) when the test ends.
type nodeEnv struct {
	t        *testing.T
	dir      string
	kubelet  string
	state    string
	s3dir    string
	endpoint string
	client   kubernetes.Interface
	rec      *s3mounttest.Events
	remount  *nodeRemounter
}

// nodeRemounter records the container remounter's requests and passes them to the real
// container remounter (containermount) for the stand-in containers a test started
// (nodeEnv.container), with the pod as kubelet runs it: one container per stand-in, mounting
// the volume at its directory with mountPropagation HostToContainer. Restored mounts go beneath
// the dead ones at kubelet's paths, so such a container gets them from the remounter, not by
// propagation.
type nodeRemounter struct {
	mu   sync.Mutex
	devs []string
	real *containermount.Remounter
	// by stand-in container name: its pid and mount point
	ctrs    map[string]standIn
	cgroups map[int]string
}

type standIn struct {
	pid  int
	path string
	proc *os.Process
}

func (n *nodeRemounter) RemountPods(ctx context.Context, reqs []nodeagent.RemountRequest) []nodeagent.RemountOutcome {
	return nodeagent.RemountEach(ctx, n, reqs)
}

func (n *nodeRemounter) RemountInContainers(ctx context.Context, req nodeagent.RemountRequest) (nodeagent.RemountResult, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.devs = append(n.devs, req.DeadDevice)
	if n.real == nil || req.Pod == nil {
		return nodeagent.RemountResult{}, nil
	}
	pod := req.Pod.DeepCopy()
	htc := corev1.MountPropagationHostToContainer
	for name, c := range n.ctrs {
		n.cgroups[c.pid] = containermounttest.PodCgroup(string(pod.UID), name+"-id")
		pod.Spec.Containers = append(pod.Spec.Containers, corev1.Container{Name: name,
			VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: c.path, MountPropagation: &htc}}})
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: name, ContainerID: "containerd://" + name + "-id"})
	}
	req.Pod = pod
	return n.real.RemountInContainers(ctx, req)
}

// stopContainers ends every stand-in container, as kubelet stops a deleted pod's containers
// before its volume teardown: a container's own copy of the volume (the remounter's clone) would
// otherwise keep the mount, and the FUSE daemon behind it, alive.
func (e *nodeEnv) stopContainers() {
	n := e.remount
	n.mu.Lock()
	defer n.mu.Unlock()
	for name, c := range n.ctrs {
		_ = c.proc.Kill()
		_, _ = c.proc.Wait()
		delete(n.ctrs, name)
	}
}

// standIn registers a stand-in container for the real container remounter.
func (n *nodeRemounter) standIn(t testing.TB, name string, proc *os.Process, path string) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.real == nil {
		support := mountreplace.NodeSupport()
		if !support.Beneath {
			t.Fatalf("this kernel must mount beneath (Linux >= 6.5): %v", support.Err)
		}
		cmOS, err := containermount.NewOS("/proc", support)
		must(t, err)
		n.cgroups = map[int]string{}
		n.ctrs = map[string]standIn{}
		cmOS.Proc = containermounttest.CgroupProcFS{ProcFS: cmOS.Proc, Cgroups: n.cgroups}
		n.real, err = containermount.New(nodeagent.Deps{Registerer: prometheus.NewRegistry()}, cmOS, containermount.Options{})
		must(t, err)
	}
	n.ctrs[name] = standIn{pid: proc.Pid, path: path, proc: proc}
}

// asks is how many times the remounter was asked so far: with askedSince, a test waits for an
// ask after a given death (a FUSE device number is reused, so a dead device alone does not tell
// one death from another).
func (n *nodeRemounter) asks() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.devs)
}

// askedSince: dev was asked about after the first `from` asks.
func (n *nodeRemounter) askedSince(from int, dev string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Contains(n.devs[min(from, len(n.devs)):], dev)
}

func newNodeEnv(t *testing.T) *nodeEnv {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "s3fs", "apt-get install s3fs")
	testenv.RequireCommand(t, "unshare", "apt-get install util-linux")
	testenv.RequireCommand(t, "nsenter", "apt-get install util-linux")
	srv := testenv.S3(t, bucket)

	dir := t.TempDir()
	e := &nodeEnv{t: t, dir: dir, kubelet: filepath.Join(dir, "kubelet"), state: filepath.Join(dir, "state"),
		s3dir: srv.Dir, endpoint: srv.Endpoint(), rec: s3mounttest.NewEvents(), remount: &nodeRemounter{}}
	for _, d := range []string{e.kubelet, e.state, filepath.Join(e.s3dir, bucket, "pfx"), filepath.Join(dir, "driver")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	_, cfg := testenv.APIServer(t)
	client, err := kubernetes.NewForConfig(cfg)
	must(t, err)
	e.client = client

	// kubelet makes its root directory a shared mount; do the same for the temporary one.
	must(t, unix.Mount(e.kubelet, e.kubelet, "", unix.MS_BIND, ""))
	must(t, unix.Mount("", e.kubelet, "", unix.MS_SHARED, ""))
	testenv.Sweep(t, dir)

	ctx := context.Background()
	_, err = client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: ns},
		Data: map[string][]byte{"accessKeyID": []byte(ak), "secretAccessKey": []byte(sk),
			"endpoint": []byte(e.endpoint)},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = client.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
		ObjectMeta:  metav1.ObjectMeta{Name: "s3"},
		Provisioner: driver,
		Parameters: map[string]string{
			"mounter": "s3fs",
			"csi.storage.k8s.io/node-publish-secret-name":      "s3-creds",
			"csi.storage.k8s.io/node-publish-secret-namespace": ns,
		},
	}, metav1.CreateOptions{})
	must(t, err)
	return e
}

// volume creates a PV (handle bkt/<prefix>) and a bound PVC named after it.
func (e *nodeEnv) volume(name string, secret *corev1.SecretReference, readOnly bool) {
	e.t.Helper()
	if secret == nil {
		secret = &corev1.SecretReference{Name: "s3-creds", Namespace: ns}
	}
	e.claimedVolume(name, &corev1.CSIPersistentVolumeSource{ReadOnly: readOnly, NodePublishSecretRef: secret,
		VolumeAttributes: map[string]string{"mounter": "s3fs", "capacity": "1073741824"}})
}

// claimedVolume makes the bucket prefix bkt/<name>, then a 1Gi RWX PV of class s3 named name whose
// CSI source is src with this driver and handle bkt/<name>, and its claim, bound to each other.
func (e *nodeEnv) claimedVolume(name string, src *corev1.CSIPersistentVolumeSource) {
	e.t.Helper()
	ctx := context.Background()
	must(e.t, os.MkdirAll(filepath.Join(e.s3dir, bucket, name), 0o755))
	src.Driver, src.VolumeHandle = driver, bucket+"/"+name
	_, err := e.client.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName:       "s3",
			ClaimRef:               &corev1.ObjectReference{Namespace: ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: src},
		},
	}, metav1.CreateOptions{})
	must(e.t, err)
	sc := "s3"
	_, err = e.client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany},
			StorageClassName: &sc,
			VolumeName:       name,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}, metav1.CreateOptions{})
	must(e.t, err)
	e.bind(name)
}

// bind does what the PV controller (not running here) does for the PV and claim named name: the
// PV's claimRef gets the claim's UID and the claim becomes Bound. The agent counts a claim only
// when both ends name each other.
func (e *nodeEnv) bind(name string) {
	e.t.Helper()
	ctx := context.Background()
	pvc, err := e.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	must(e.t, err)
	pv, err := e.client.CoreV1().PersistentVolumes().Get(ctx, name, metav1.GetOptions{})
	must(e.t, err)
	pv.Spec.ClaimRef.UID = pvc.UID
	pv, err = e.client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	must(e.t, err)
	pv.Status.Phase = corev1.VolumeBound
	_, err = e.client.CoreV1().PersistentVolumes().UpdateStatus(ctx, pv, metav1.UpdateOptions{})
	must(e.t, err)
	pvc.Status.Phase = corev1.ClaimBound
	_, err = e.client.CoreV1().PersistentVolumeClaims(ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{})
	must(e.t, err)
}

// pod creates a pod on the node using the claim, with a Running status as kubelet would report.
func (e *nodeEnv) pod(name, claim string) *corev1.Pod {
	e.t.Helper()
	ctx := context.Background()
	p, err := e.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}, metav1.CreateOptions{})
	must(e.t, err)
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{
		Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	p, err = e.client.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	must(e.t, err)
	return p
}

// publish does what kubelet + the CSI driver do: vol_data.json, then s3fs at the target.
// It returns the target and the driver's s3fs process.
func (e *nodeEnv) publish(pod *corev1.Pod, pv string) (string, *os.Process) {
	e.t.Helper()
	target := csiclient.TargetPath(e.kubelet, string(pod.UID), pv)
	must(e.t, os.MkdirAll(target, 0o750))
	vd, _ := json.Marshal(map[string]string{"specVolID": pv, "volumeHandle": bucket + "/" + pv,
		"driverName": driver, "nodeName": nodeName, "attachmentID": "", "volumeLifecycleMode": "Persistent"})
	must(e.t, os.WriteFile(filepath.Join(filepath.Dir(target), csiclient.VolDataFile), vd, 0o644))
	pw := filepath.Join(e.dir, "driver", string(pod.UID)+".passwd") // a PV name may be too long for a file name
	must(e.t, os.WriteFile(pw, []byte(ak+":"+sk+"\n"), 0o600))
	cmd := exec.Command("s3fs", bucket+":/"+pv, target, "-f", "-o", "passwd_file="+pw, "-o", "url="+e.endpoint,
		"-o", "use_path_request_style", "-o", "allow_other")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(e.t, cmd.Start())
	go func() { _ = cmd.Wait() }() // reap it whenever it dies; the test kills it on purpose
	waitFor(e.t, 20*time.Second, "driver s3fs mounted at "+target, func() bool {
		var st unix.Statfs_t
		return topSource(target) == "s3fs" && unix.Statfs(target, &st) == nil
	})
	return target, cmd.Process
}

func (e *nodeEnv) config() *config.Config {
	cfg := config.Default()
	cfg.KubeletDir, cfg.StateDir = e.kubelet, e.state
	cfg.S3.CheckInterval = metav1.Duration{Duration: 200 * time.Millisecond}
	cfg.S3.StatfsTimeout = metav1.Duration{Duration: time.Second}
	// No plugin socket in the bridge tests: bridge at once (the replay test's plugin answers, so
	// it replays first regardless).
	cfg.S3.BridgeAfter = metav1.Duration{}
	return cfg
}

// agent starts a restorer and returns a function that stops it (also run at cleanup).
func (e *nodeEnv) agent(mountTimeout time.Duration) (*s3mount.Restorer, func()) {
	e.t.Helper()
	view, err := nodeagent.NewKubeView(e.client, nodeName, clock.RealClock{}, nodeagent.ViewOptions{TTL: time.Second})
	must(e.t, err)
	deps := nodeagent.Deps{NodeName: nodeName, Config: e.config(), Client: e.client, View: view, Recorder: e.rec.Recorder,
		Registerer: prometheus.NewRegistry(), Clock: clock.RealClock{}, Remounter: e.remount}
	r, err := s3mount.New(deps, s3mount.NewOS(), s3mount.Options{
		BackoffInitial: 300 * time.Millisecond, BackoffMax: 2 * time.Second, MountTimeout: mountTimeout,
		KillGrace: 2 * time.Second,
	})
	must(e.t, err)
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.New(e.t)))
	done := make(chan error, 1)
	must(e.t, view.Start(ctx))
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("agent Run: %v", err)
			}
			view.Shutdown()
		})
	}
	e.t.Cleanup(stop)
	return r, stop
}

// container starts a process in its own mount namespace whose /…/ctr-<name> is a bind of the
// target with slave propagation — what a container with mountPropagation HostToContainer sees.
func (e *nodeEnv) container(name, target string) (run func(script string) (string, error)) {
	e.t.Helper()
	ctr := filepath.Join(e.dir, "ctr-"+name)
	must(e.t, os.MkdirAll(ctr, 0o755))
	cmd := exec.Command("unshare", "-m", "--propagation", "slave", "sh", "-c",
		fmt.Sprintf("mount --bind %q %q && exec sleep 3600", target, ctr))
	cmd.Stderr = os.Stderr
	must(e.t, cmd.Start())
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	e.remount.standIn(e.t, name, cmd.Process, ctr)
	run = func(script string) (string, error) {
		out, err := exec.Command("nsenter", "-t", strconv.Itoa(cmd.Process.Pid), "-m", "--",
			"sh", "-c", "cd "+ctr+" && "+script).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	waitFor(e.t, 5*time.Second, "container mount namespace ready", func() bool {
		out, err := exec.Command("nsenter", "-t", strconv.Itoa(cmd.Process.Pid), "-m", "--", "findmnt", "-n", ctr).CombinedOutput()
		return err == nil && len(out) > 0
	})
	return run
}

func TestNodeRestoreAfterS3fsDeath(t *testing.T) {
	e := newNodeEnv(t)
	e.volume("pv-a", nil, false)
	pod := e.pod("app-a", "pv-a")
	target, driverProc := e.publish(pod, "pv-a")
	must(t, os.WriteFile(filepath.Join(target, "before.txt"), []byte("written before\n"), 0o644))
	ctr := e.container("a", target)
	if out, err := ctr("cat before.txt"); err != nil || out != "written before" {
		t.Fatalf("container view before the failure: %q, %v", out, err)
	}
	r, _ := e.agent(30 * time.Second)
	time.Sleep(time.Second) // let it see the healthy mount first: it must not touch it
	if n := len(stackAt(target)); n != 1 {
		t.Fatalf("agent stacked onto a healthy target: %d mounts at %s", n, target)
	}

	var samples []time.Duration
	for i := 0; i < 5; i++ {
		proc := driverProc
		if i > 0 {
			proc = bridgeProcess(t, e.bridgeDir("pv-a"))
		}
		t0 := time.Now()
		served := topMountID(target)
		must(t, proc.Signal(syscall.SIGKILL))
		waitFor(t, 30*time.Second, "target restored: another mount answers there", func() bool { return restoredSince(target, served) })
		d := time.Since(t0)
		samples = append(samples, d)
		// Bounded stack: the driver's dead mount plus one live mount of ours, never more.
		if n := len(stackAt(target)); n > 2 {
			t.Errorf("after restore %d: %d mounts at the target, want <= 2", i+1, n)
		}
		if n := len(s3fsPidsUnder(e.dir)); n != 1 {
			t.Errorf("after restore %d: %d s3fs processes, want 1 (ours; no leak)", i+1, n)
		}
		t.Logf("sample %d: s3fs killed (%s) -> target answers again after %s", i+1,
			map[bool]string{true: "driver's s3fs", false: "agent's bridge s3fs"}[i == 0], d.Round(time.Millisecond))

		containerReads(t, ctr, fmt.Sprintf("cat before.txt && echo after-%d > after-%d.txt && cat after-%d.txt", i, i, i),
			fmt.Sprintf("written before\nafter-%d", i), fmt.Sprintf("container view after restore %d", i+1))
		waitFor(t, 10*time.Second, "data written after recovery is in the bucket", func() bool {
			b, err := os.ReadFile(filepath.Join(e.s3dir, bucket, "pv-a", fmt.Sprintf("after-%d.txt", i)))
			return err == nil && string(b) == fmt.Sprintf("after-%d\n", i)
		})
	}
	sorted := append([]time.Duration(nil), samples...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	t.Logf("time from s3fs death to restored mount: p50 %s, min %s, max %s over %d samples (check interval 200ms)",
		sorted[len(sorted)/2].Round(time.Millisecond), sorted[0].Round(time.Millisecond), sorted[len(sorted)-1].Round(time.Millisecond), len(sorted))

	// Exactly one bridge mount, our binds on the target, everything else the driver's dead mount.
	if n := len(stackAt(e.bridgeDir("pv-a"))); n != 1 {
		t.Errorf("bridge mounts for pv-a: %d, want 1", n)
	}
	st, err := os.Stat(filepath.Join(e.state, "s3", "creds", "pv-a.passwd"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("passwd file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	if s := topFSType(filepath.Join(e.state, "s3", "creds")); s != "tmpfs" {
		t.Errorf("creds dir is on %q, want tmpfs", s)
	}
	// Each Event is recorded after its bind is in place (restored.go): the last may trail the
	// last sample.
	waitFor(t, 10*time.Second, "5 or more MountBridged events", func() bool {
		return e.rec.Count(corev1.EventTypeNormal, contract.ReasonMountBridged, "") >= 5
	})
	if got := counterValue(t, r.Metrics().Restores.WithLabelValues(s3mount.MethodBridge, "success")); got < 5 {
		t.Errorf("restored metric %v, want >= 5", got)
	}
	assertNoSecrets(t, e.rec)

	// Pod deleted: the bridge retires (its mount and passwd file go), and the target keeps one
	// mount for kubelet's teardown, whose NodeUnpublishVolume (a plain umount, as k8s-csi-s3's)
	// must find one; after it, nothing is left and the bridge's s3fs exits.
	e.stopContainers()
	must(t, e.client.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, *metav1.NewDeleteOptions(0)))
	waitFor(t, 10*time.Second, "bridge mount and passwd file removed", func() bool {
		_, err := os.Stat(filepath.Join(e.state, "s3", "creds", "pv-a.passwd"))
		return len(stackAt(e.bridgeDir("pv-a"))) == 0 && errors.Is(err, os.ErrNotExist)
	})
	time.Sleep(time.Second) // five more passes: the agent must still leave the target's last mount
	if n := len(stackAt(target)); n != 1 {
		t.Fatalf("target of the deleted pod holds %d mounts, want 1 (left for the driver's NodeUnpublish)", n)
	}
	must(t, unix.Unmount(target, 0)) // kubelet's teardown: the driver's plain umount
	waitFor(t, 10*time.Second, "no s3fs left", func() bool { return len(s3fsPidsUnder(e.dir)) == 0 })
}

func TestNodeAgentRestartReadopts(t *testing.T) {
	e := newNodeEnv(t)
	e.volume("pv-b", nil, false)
	pod := e.pod("app-b", "pv-b")
	target, driverProc := e.publish(pod, "pv-b")
	_, stop := e.agent(30 * time.Second)
	served := topMountID(target)
	must(t, driverProc.Signal(syscall.SIGKILL))
	waitFor(t, 30*time.Second, "target restored", func() bool {
		return restoredSince(target, served) && len(stackAt(target)) == 1
	})
	bridge := e.bridgeDir("pv-b")
	r2, before := e.restartKeepsBridge(stop, bridge, target)
	if got := counterValue(t, r2.Metrics().DeadFound); got != 0 {
		t.Errorf("restarted agent found %v dead mounts, want 0", got)
	}
	// The adopted s3fs is not the new agent's child; its death is still found and repaired.
	p, _ := os.FindProcess(before)
	adopted := topMountID(target)
	must(t, p.Signal(syscall.SIGKILL))
	waitFor(t, 30*time.Second, "target restored by the restarted agent", func() bool {
		return restoredSince(target, adopted) && len(stackAt(target)) == 1
	})
}

// restartKeepsBridge stops the agent with stop and starts another; after ten check intervals the
// new one must have re-adopted the bridge at bridge, not duplicated it: one mount there, one at
// target (the bridge's bind, beneath where the dead driver mount was), the same s3fs pid as before
// the restart. It returns the new agent and that pid.
func (e *nodeEnv) restartKeepsBridge(stop func(), bridge, target string) (*s3mount.Restorer, int) {
	t := e.t
	t.Helper()
	before := bridgeProcess(t, bridge).Pid
	stop()
	r2, _ := e.agent(30 * time.Second)
	time.Sleep(2 * time.Second) // ten check intervals
	if n := len(stackAt(bridge)); n != 1 {
		t.Errorf("bridge mounts after agent restart: %d, want 1 (re-adopted, not duplicated)", n)
	}
	if n := len(stackAt(target)); n != 1 {
		t.Errorf("mounts at target after agent restart: %d, want 1 (our bind, put beneath the dead driver mount, which went)", n)
	}
	if after := bridgeProcess(t, bridge).Pid; after != before {
		t.Errorf("s3fs pid changed across agent restart: %d -> %d", before, after)
	}
	return r2, before
}

// containerReads waits until cmd in the stand-in container prints want. The host's target
// answers first: with the live mount put beneath the dead one, a HostToContainer container gets
// it from containermount's pass that follows the restore, not by propagation at the same instant.
func containerReads(t *testing.T, ctr func(string) (string, error), cmd, want, what string) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, what, func() error {
		out, err := ctr(cmd)
		if err != nil {
			return fmt.Errorf("%q: %w", out, err)
		}
		if out != want {
			return fmt.Errorf("got %q, want %q", out, want)
		}
		return nil
	})
}

func TestNodeReadOnlyVolumeStaysReadOnly(t *testing.T) {
	e := newNodeEnv(t)
	e.volume("pv-ro", nil, true)
	must(t, os.WriteFile(filepath.Join(e.s3dir, bucket, "pv-ro", "seed.txt"), []byte("seed\n"), 0o644))
	pod := e.pod("app-ro", "pv-ro")
	target, proc := e.publish(pod, "pv-ro")
	ctr := e.container("ro", target)
	e.agent(30 * time.Second)
	served := topMountID(target)
	must(t, proc.Signal(syscall.SIGKILL))
	waitFor(t, 30*time.Second, "target restored", func() bool { return restoredSince(target, served) })
	top, _ := mountTable().Top(target)
	if !top.ReadOnly() {
		t.Errorf("restored bind of a read-only PV is writable: %+v", top)
	}
	containerReads(t, ctr, "cat seed.txt", "seed", "container reads the seed")
	if out, err := ctr("echo x > new.txt"); err == nil || !strings.Contains(out, "Read-only file system") {
		t.Errorf("write into a read-only volume: %q, %v; want EROFS", out, err)
	}
}

func TestNodeBadInputLeavesTargetAlone(t *testing.T) {
	e := newNodeEnv(t)
	ctx := context.Background()
	_, err := e.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "wrong-keys", Namespace: ns},
		Data: map[string][]byte{"accessKeyID": []byte(ak), "secretAccessKey": []byte("not-the-secret"),
			"endpoint": []byte(e.endpoint)},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = e.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "server-down", Namespace: ns},
		Data: map[string][]byte{"accessKeyID": []byte(ak), "secretAccessKey": []byte(sk),
			"endpoint": []byte(fmt.Sprintf("http://127.0.0.1:%d", testenv.FreePort(t)))},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = e.client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "no-keys", Namespace: ns},
		Data:       map[string][]byte{"endpoint": []byte(e.endpoint)},
	}, metav1.CreateOptions{})
	must(t, err)

	cases := []struct {
		pv, secret, reason string
	}{
		{"pv-missing", "does-not-exist", "SecretNotFound"},
		{"pv-nokeys", "no-keys", "SecretKeyMissing"},
		{"pv-wrong", "wrong-keys", "S3fsFailed"},
		{"pv-down", "server-down", "S3fsFailed"},
	}
	type fixture struct {
		pod    *corev1.Pod
		target string
		dead   stack.Mount
	}
	fx := map[string]fixture{}
	for _, c := range cases {
		e.volume(c.pv, &corev1.SecretReference{Name: c.secret, Namespace: ns}, false)
		pod := e.pod("app-"+c.pv, c.pv)
		target, proc := e.publish(pod, c.pv)
		must(t, proc.Signal(syscall.SIGKILL))
		waitFor(t, 5*time.Second, "mount dead", func() bool {
			var st unix.Statfs_t
			return errors.Is(unix.Statfs(target, &st), syscall.ENOTCONN)
		})
		fx[c.pv] = fixture{pod: pod, target: target, dead: stackAt(target)[0]}
	}
	// A short mount timeout so an unreachable endpoint fails (and is retried) within the test.
	r, _ := e.agent(3 * time.Second)
	for _, c := range cases {
		t.Run(c.pv, func(t *testing.T) {
			waitFor(t, 40*time.Second, "two MountRestoreFailed events with reason "+c.reason, func() bool {
				// The message names the volume, and so the pod (one pod per volume here).
				return e.rec.Count(corev1.EventTypeWarning, contract.ReasonMountRestoreFailed, c.reason+": restoring S3 volume "+c.pv+":") >= 2
			})
			s := stackAt(fx[c.pv].target)
			if len(s) != 1 || s[0].ID != fx[c.pv].dead.ID {
				t.Errorf("target changed: %+v, want only the dead driver mount %+v", s, fx[c.pv].dead)
			}
			var st unix.Statfs_t
			if err := unix.Statfs(fx[c.pv].target, &st); !errors.Is(err, syscall.ENOTCONN) {
				t.Errorf("target statfs: %v, want ENOTCONN (the dead mount, not a plain directory)", err)
			}
			if n := len(stackAt(e.bridgeDir(c.pv))); n != 0 {
				t.Errorf("%d mounts left at the bridge mount point after failures", n)
			}
			if _, err := os.Stat(filepath.Join(e.state, "s3", "creds", c.pv+".passwd")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("passwd file left after a failed mount: %v", err)
			}
		})
	}
	t.Logf("failures by reason: SecretNotFound=%v SecretKeyMissing=%v S3fsFailed=%v",
		counterValue(t, r.Metrics().Failures.WithLabelValues("SecretNotFound")),
		counterValue(t, r.Metrics().Failures.WithLabelValues("SecretKeyMissing")),
		counterValue(t, r.Metrics().Failures.WithLabelValues("S3fsFailed")))
	assertNoSecrets(t, e.rec)
}

// --- helpers ---

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// topMountID is the unique ID (statx STATX_MNT_ID_UNIQUE, Linux ≥ 6.8; never reused, unlike
// mountinfo's) of the mount serving path, 0 if statx cannot tell. statx asks for nothing else, so
// a dead FUSE mount answers too.
func topMountID(path string) uint64 {
	var stx unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID_UNIQUE, &stx) != nil || stx.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return 0
	}
	return stx.Mnt_id
}

// restoredSince reports whether another mount than before (topMountID before a kill) now serves
// path and answers statfs: evidence of the kill and the restore that a rescue faster than any
// poll cannot hide, and that the killed daemon's mount, not dead yet, cannot give.
func restoredSince(path string, before uint64) bool {
	var st unix.Statfs_t
	id := topMountID(path)
	return id != 0 && id != before && unix.Statfs(path, &st) == nil
}

// waitFor is testenv.WaitFor for a predicate.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, timeout, what, testenv.Until(cond))
}

func mountTable() stack.Table {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		panic(err)
	}
	tab, err := stack.ParseMountInfo(string(b))
	if err != nil {
		panic(err)
	}
	return tab
}

func stackAt(path string) []stack.Mount { return mountTable().Stack(path) }

func topSource(path string) string {
	m, _ := mountTable().Top(path)
	return m.Source
}

func topFSType(path string) string {
	m, _ := mountTable().Top(path)
	return m.FSType
}

// bridgeDir is where the agent mounts its own s3fs (the bridge) for pv. On disk it is
// <state>/s3/staging/<pv>, the name earlier agents used (see s3fs.Layout.MountRoot).
func (e *nodeEnv) bridgeDir(pv string) string { return s3fs.Layout{StateDir: e.state}.MountPoint(pv) }

// bridgeProcess finds the s3fs serving a bridge mount point.
func bridgeProcess(t testing.TB, dir string) *os.Process {
	t.Helper()
	var found *os.Process
	waitFor(t, 10*time.Second, "s3fs process for "+dir, func() bool {
		for _, pid := range testenv.S3fsPIDs(dir) {
			found, _ = os.FindProcess(pid)
			return true
		}
		return false
	})
	return found
}

// s3fsPidsUnder returns the s3fs processes with an argument under dir (this test's), so other
// s3fs on the machine do not count.
func s3fsPidsUnder(dir string) []int { return testenv.S3fsPIDs(dir) }

// counterValue sums a counter's (or a gauge's) samples.
func counterValue(t testing.TB, c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var total float64
	for m := range ch {
		var pb dto.Metric
		must(t, m.Write(&pb))
		total += pb.GetCounter().GetValue() + pb.GetGauge().GetValue()
	}
	return total
}

// assertNoSecrets fails when an Event names a secret key.
func assertNoSecrets(t testing.TB, events *s3mounttest.Events) {
	t.Helper()
	for _, e := range events.All() {
		if strings.Contains(e, sk) || strings.Contains(e, "not-the-secret") {
			t.Errorf("event leaks a secret: %+v", e)
		}
	}
}
