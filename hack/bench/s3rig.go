package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/fusewatch"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Keys of the bench's S3 server (never real credentials) and its bucket.
const (
	s3Bucket = "bkt"
	s3AK     = "AKIABENCHPVRESCUE"
	s3SK     = "bench-secret-not-logged-0123456789"
)

// Timings of one restore measurement.
const (
	// benchPoll is how often a measurement looks at what it waits for: it bounds the
	// quantisation of every latency figure.
	benchPoll = 5 * time.Millisecond
	// deadTimeout and restoreTimeout bound a kill's effect and the restore.
	deadTimeout    = 5 * time.Second
	restoreTimeout = 60 * time.Second
)

// s3Names are the API objects of one S3 scenario (each section has its own in the shared
// control plane).
type s3Names struct{ ns, node, sc, pv string }

func newS3Names(prefix string) s3Names {
	return s3Names{ns: prefix, node: prefix + "-node", sc: prefix, pv: prefix + "-pv"}
}

// s3Rig is one pod's S3 volume on a stand-in node: a real versitygw, the volume published at the
// pod's target by a real s3fs (as the driver would), the pod and its objects in the shared
// kube-apiserver, the node plugin (csitest, answering at <kubelet>/plugins/<driver>/csi.sock)
// and the agent's s3mount Restorer with the shipped defaults.
type s3Rig struct {
	names            s3Names
	dir, kubelet     string
	state            string
	cfg              *config.Config
	driver, endpoint string
	cs               kubernetes.Interface
	reg              *prometheus.Registry
	pod              *corev1.Pod
	target           string
	// targets are every pod's target (target is the first pod's), each published by an s3fs of
	// its own in driverMounts until the first plugin restart.
	targets      []string
	srv          *testenv.S3Server
	driverMounts []*testenv.S3fsMount
	plugin       *csitest.Plugin
	// rollIn gives the start of the new plugin of a "rolled" stress incident.
	rollIn chan error
	deps   nodeagent.Deps
	// exits receives the time fusewatch saw each watched FUSE daemon exit (nil without fusewatch).
	exits chan time.Time
	// log is the agent's logger (-agent-log; discards otherwise); the bench marks its steps in it.
	log  logr.Logger
	undo []func()
	// stopAgent stops the running agent (startAgent); nil when none runs.
	stopAgent func()
}

// s3RigOptions choose the pod and what the agent is built with.
type s3RigOptions struct {
	names s3Names
	// pod is the pod's spec (node name and the claim are set by the rig); its status lists
	// containers, each running.
	pod corev1.PodSpec
	// files are written into the volume (relative to its prefix) before anything mounts it.
	files map[string]string
	// remounter, when set, builds the agent's container remounter from its dependencies.
	remounter func(nodeagent.Deps) (nodeagent.ContainerRemounter, error)
	// checkInterval, when set, replaces the shipped s3.checkInterval.
	checkInterval time.Duration
	// pollOnly leaves fusewatch and the plugin-socket watch out (the agent before event-driven
	// detection: the periodic check alone notices a loss).
	pollOnly bool
	// stacking takes s3mount's Replacer out (the agent before replace-beneath, and its fallback):
	// restored mounts are bound on top of the dead ones at kubelet's paths.
	stacking bool
	// pods is how many pods use the claim (0: one); pods after the first are named app-<i>.
	pods int
	// configure, when set, changes the agent's configuration after the rig's own changes.
	configure func(*config.Config)
}

// newS3Rig sets the scenario up; close undoes it, also after an error part way.
func newS3Rig(ctx context.Context, o *Options, ro s3RigOptions) (r *s3Rig, err error) {
	r = &s3Rig{names: ro.names, log: logr.Discard()}
	defer func() {
		if err != nil {
			r.close()
			r = nil
		}
	}()
	if err := requireRoot(); err != nil {
		return r, err
	}
	gw, err := requireBin(o, "versitygw", "versitygw")
	if err != nil {
		return r, err
	}
	if _, err := exec.LookPath("s3fs"); err != nil {
		return r, errors.New("s3fs not found: apt-get install s3fs (make node-deps)")
	}
	restCfg, err := sharedControlPlane.get(o)
	if err != nil {
		return r, err
	}
	if r.cs, err = kubernetes.NewForConfig(restCfg); err != nil {
		return r, err
	}
	if r.dir, err = os.MkdirTemp("", "pvrescue-bench-"+ro.names.ns+"-"); err != nil {
		return r, err
	}
	r.undo = append(r.undo, func() { _ = os.RemoveAll(r.dir) })
	r.kubelet, r.state = filepath.Join(r.dir, "kubelet"), filepath.Join(r.dir, "state")
	for _, d := range []string{r.kubelet, r.state} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return r, err
		}
	}
	port, err := testenv.PickPort("")
	if err != nil {
		return r, err
	}
	sc := testenv.S3Config{Addr: testenv.Addr("127.0.0.1", port), Dir: filepath.Join(r.dir, "s3"), AccessKey: s3AK, SecretKey: s3SK}
	for rel, content := range ro.files {
		p := filepath.Join(sc.Dir, s3Bucket, ro.names.pv, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return r, err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return r, err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	r.srv, err = testenv.StartS3Server(sctx, gw, sc, io.Discard)
	cancel()
	if err != nil {
		return r, err
	}
	r.undo = append(r.undo, func() { _ = r.srv.Stop() })
	r.endpoint = sc.Endpoint()
	// kubelet makes its root directory a shared mount; do the same for the temporary one.
	if err := unix.Mount(r.kubelet, r.kubelet, "", unix.MS_BIND, ""); err != nil {
		return r, err
	}
	r.undo = append(r.undo, func() {
		if err := testenv.SweepMounts(r.dir); err != nil {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
	})
	if err := unix.Mount("", r.kubelet, "", unix.MS_SHARED, ""); err != nil {
		return r, err
	}

	r.cfg = config.Default()
	// The bridge runs come a second apart: a plugin dying every second, which the flap limit
	// (s3.bridgeFlapLimit) makes wait s3.bridgeAfter; off here, on in the containerized section.
	r.cfg.S3.BridgeFlapLimit = 0
	r.cfg.KubeletDir, r.cfg.StateDir = r.kubelet, r.state
	if ro.checkInterval > 0 {
		r.cfg.S3.CheckInterval.Duration = ro.checkInterval
	}
	if ro.configure != nil {
		ro.configure(r.cfg)
	}
	r.driver = r.cfg.S3.Drivers[0]
	pods, err := r.seed(ctx, ro.pod, max(ro.pods, 1))
	if err != nil {
		return r, err
	}
	r.pod = pods[0]
	for _, p := range pods {
		r.targets = append(r.targets, s3mount.TargetPath(r.kubelet, string(p.UID), ro.names.pv))
	}
	r.target = r.targets[0]
	for _, t := range r.targets {
		if err := r.publish(ctx, t); err != nil {
			return r, err
		}
	}
	if err := r.startPlugin(); err != nil {
		return r, err
	}
	if o.AgentLog != "" {
		f, err := os.OpenFile(o.AgentLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return r, err
		}
		r.undo = append(r.undo, func() { _ = f.Close() })
		var mu sync.Mutex
		r.log = funcr.New(func(prefix, args string) {
			mu.Lock()
			defer mu.Unlock()
			_, _ = fmt.Fprintln(f, prefix, args) // a diagnostic log: a lost line changes no figure
		}, funcr.Options{LogTimestamp: true, TimestampFormat: "15:04:05.000000", Verbosity: 1}).WithValues("rig", ro.names.ns)
	}
	// The plugin goes after the agent (it replays through it until the end).
	r.undo = append(r.undo, func() {
		r.stopRunningAgent()
		r.plugin.KillMounts()
		r.plugin.Stop()
	})
	return r, r.startAgent(logr.NewContext(ctx, r.log), ro)
}

// stopRunningAgent stops the agent startAgent started, if one runs.
func (r *s3Rig) stopRunningAgent() {
	if r.stopAgent != nil {
		r.stopAgent()
		r.stopAgent = nil
	}
}

// onDriver reports whether the target's top mount is not our bridge (the driver's, live or dead).
func (r *s3Rig) onDriver() bool {
	table, err := s3mount.NewOS().Mounter.MountTable()
	if err != nil {
		return false
	}
	for _, t := range r.targets {
		top, ok := table.Top(t)
		if !ok {
			return false
		}
		if _, ours := stack.PVFromFSName(top.Source); ours {
			return false
		}
	}
	return true
}

// close undoes the set-up, newest first.
func (r *s3Rig) close() {
	for i := len(r.undo) - 1; i >= 0; i-- {
		r.undo[i]()
	}
	r.undo = nil
}

func (r *s3Rig) startPlugin() error {
	p, err := csitest.Start(csitest.Options{Socket: s3mount.PluginSocket(r.kubelet, r.driver), StateDir: filepath.Join(r.dir, "plugin")})
	if err != nil {
		return err
	}
	r.plugin = p
	return nil
}

// restartPlugin is a node plugin restart: every s3fs of the driver dies with SIGKILL (the one the
// bench published first, then the plugin's own), the plugin stops serving and a new plugin
// process serves the same socket at once.
func (r *s3Rig) restartPlugin() error {
	for _, m := range r.driverMounts {
		m.Kill()
	}
	r.driverMounts = nil
	r.killDriverDaemons()
	r.plugin.Stop()
	return r.startPlugin()
}

// killDriverDaemons SIGKILLs every s3fs of the driver: the plugin's, and any an earlier plugin
// process started for a call that raced its stop (a real plugin pod's restart takes every
// process of its container). The agent's bridges mount under the state directory, not under
// kubelet's: they live on.
func (r *s3Rig) killDriverDaemons() {
	r.plugin.KillMounts()
	for _, pid := range testenv.S3fsPIDs(r.kubelet) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// stopPlugin stops the plugin for good: it no longer answers; its s3fs keep running until killed.
func (r *s3Rig) stopPlugin() {
	r.plugin.Stop()
}

// startAgent wires the agent's S3 rescue as cmd/pvrescue-agent does: fusewatch waking it on a
// FUSE daemon's exit (unless ro.pollOnly), the container remounter when ro has one.
func (r *s3Rig) startAgent(ctx context.Context, ro s3RigOptions) error {
	remounter := ro.remounter
	var stops []func()
	defer func() {
		if r.stopAgent == nil { // failed part way: undo what started
			for i := len(stops) - 1; i >= 0; i-- {
				stops[i]()
			}
		}
	}()
	rec, stopRec := nodeagent.NewRecorder(r.cs, r.names.node, nodeagent.RecorderOptions{})
	stops = append(stops, stopRec)
	r.reg = prometheus.NewRegistry()
	view, err := nodeagent.NewKubeView(r.cs, r.names.node, clock.RealClock{}, nodeagent.ViewOptions{RequireConsent: !r.cfg.RescueAllNamespaces})
	if err != nil {
		return err
	}
	vctx, stopView := context.WithCancel(ctx)
	if err := view.Start(vctx); err != nil {
		stopView()
		return err
	}
	stops = append(stops, func() { stopView(); view.Shutdown() }) // Shutdown waits for Start's context to end
	r.deps = nodeagent.Deps{NodeName: r.names.node, Config: r.cfg, Client: r.cs, View: view, Recorder: rec,
		Registerer: r.reg, Clock: clock.RealClock{}}
	if remounter != nil {
		if r.deps.Remounter, err = remounter(r.deps); err != nil {
			return err
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	fuseDone := make(chan error, 1)
	if ro.pollOnly {
		fuseDone <- nil
	} else {
		r.exits = make(chan time.Time, 64)
		fw, err := fusewatch.New(fusewatch.NewOS(fusewatch.OSOptions{}), fusewatch.Options{Registerer: r.reg, OnExit: func(e fusewatch.Exit) {
			select {
			case r.exits <- e.At:
			default:
			}
		}})
		if err != nil {
			cancel()
			return err
		}
		r.deps.FUSEExits = fw.Wake()
		go func() { fuseDone <- fw.Run(cctx) }()
	}
	sos := s3mount.NewOS()
	if ro.pollOnly {
		// The plugin-socket watch would wake it too (the bench's restart makes a new socket):
		// the baseline is the agent before event-driven detection, the periodic check alone.
		sos.Plugins = nil
	}
	if ro.stacking {
		sos.Replacer = nil
	}
	rs, err := s3mount.New(r.deps, sos, s3mount.NewOptions())
	if err != nil {
		cancel()
		if ferr := <-fuseDone; ferr != nil {
			fmt.Fprintf(os.Stderr, "bench: fusewatch: %v\n", ferr)
		}
		return err
	}
	done := make(chan error, 1)
	go func() { done <- rs.Run(cctx) }()
	stops = append(stops, func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "bench: s3 rescue: %v\n", err)
		}
		if err := <-fuseDone; err != nil {
			fmt.Fprintf(os.Stderr, "bench: fusewatch: %v\n", err)
		}
	})
	r.stopAgent = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	time.Sleep(time.Second) // let it see the healthy mount first
	return nil
}

// dephase waits a random time in [0, the agent's check interval) before a loss, so that losses
// fall at random points of the agent's periodic check, as a real plugin restart does. Without it
// each loss would come right after the check that restored the last one, and every sample would
// wait a whole interval to be noticed.
func (r *s3Rig) dephase(ctx context.Context) {
	d := time.Duration(rand.Int64N(int64(min(r.cfg.S3.CheckInterval.Duration, maxDephase))))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// maxDephase bounds dephase: with a check interval of an hour (the detection runs) the phase of
// the periodic check no longer matters, and the runs must not wait for it.
const maxDephase = 2 * time.Second

// drainExits forgets exits fusewatch reported so far (the next measurement's starts after them).
func (r *s3Rig) drainExits() {
	for r.exits != nil {
		select {
		case <-r.exits:
		default:
			return
		}
	}
}

// firstExit waits (up to deadTimeout) for fusewatch's next exit report at or after t0 and
// returns the time from t0 to it.
func (r *s3Rig) firstExit(ctx context.Context, t0 time.Time) (time.Duration, error) {
	if r.exits == nil {
		return 0, errors.New("the agent runs without fusewatch")
	}
	timeout := time.After(deadTimeout)
	for {
		select {
		case at := <-r.exits:
			if !at.Before(t0) {
				return at.Sub(t0), nil
			}
		case <-timeout:
			return 0, fmt.Errorf("fusewatch reported no exit within %s of the kill", deadTimeout)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// waitDead waits until the target answers ENOTCONN (the kill has taken effect).
func (r *s3Rig) waitDead(ctx context.Context, before map[string]uint64) error {
	// Each target is seen dead once: with several, the agent may restore the first before the
	// last is seen dead. A target whose mount changed since before (devices read before the
	// loss) was dead too: the agent put a new mount there between two polls — on a loaded
	// machine the dead window (tens of ms) can fall between polls (stress: 5 pods, rolled).
	seen := map[string]bool{}
	return testenv.WaitUntil(ctx, deadTimeout, benchPoll, func() bool {
		var st unix.Statfs_t
		for _, t := range r.targets {
			if seen[t] {
				continue
			}
			if errors.Is(unix.Statfs(t, &st), syscall.ENOTCONN) {
				seen[t] = true
			} else if dev, ok := mountDev(t); ok && before[t] != 0 && dev != before[t] {
				seen[t] = true
			}
		}
		return len(seen) == len(r.targets)
	})
}

// targetDevs reads the device of the mount at each target (0 where it cannot be read): what
// waitDead compares with after a loss.
func (r *s3Rig) targetDevs() map[string]uint64 {
	out := map[string]uint64{}
	for _, t := range r.targets {
		out[t], _ = mountDev(t)
	}
	return out
}

// mountDev is the device of the file system mounted at path (false when stat fails, as on a
// dead FUSE mount).
func mountDev(path string) (uint64, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, false
	}
	return st.Dev, true
}

// allRead reports whether rel reads back content at every pod's target.
func (r *s3Rig) allRead(rel, content string) bool {
	for _, t := range r.targets {
		if !readsBack(filepath.Join(t, rel), content) {
			return false
		}
	}
	return true
}

// readsBack reports whether path holds content.
func readsBack(path, content string) bool {
	b, err := os.ReadFile(path)
	return err == nil && string(b) == content
}

// seed creates the S3 objects and n pods on the claim (the first named app, then app-1, …),
// each Running with its containers.
func (r *s3Rig) seed(ctx context.Context, spec corev1.PodSpec, n int) ([]*corev1.Pod, error) {
	if err := r.seedObjects(ctx); err != nil {
		return nil, err
	}
	var pods []*corev1.Pod
	for i := range n {
		name := "app"
		if i > 0 {
			name = fmt.Sprintf("app-%d", i)
		}
		p, err := r.seedPod(ctx, name, *spec.DeepCopy())
		if err != nil {
			return nil, err
		}
		pods = append(pods, p)
	}
	return pods, nil
}

func (r *s3Rig) seedObjects(ctx context.Context) error {
	n := r.names
	sc, fs := n.sc, corev1.PersistentVolumeFilesystem
	keys := r.cfg.S3.SecretKeys
	objs := []func() error{
		func() error {
			_, err := r.cs.CoreV1().Namespaces().Create(ctx, optedIn(n.ns), metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := r.cs.CoreV1().Secrets(n.ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: n.ns},
				Data: map[string][]byte{keys.AccessKeyID: []byte(s3AK), keys.SecretAccessKey: []byte(s3SK), keys.Endpoint: []byte(r.endpoint)}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := r.cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: n.sc}, Provisioner: r.driver,
				Parameters: map[string]string{"mounter": "s3fs",
					"csi.storage.k8s.io/node-publish-secret-name": "s3-creds", "csi.storage.k8s.io/node-publish-secret-namespace": n.ns}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := r.cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: n.pv},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: n.sc, VolumeMode: &fs,
					ClaimRef: &corev1.ObjectReference{Namespace: n.ns, Name: n.pv},
					PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
						Driver: r.driver, VolumeHandle: s3Bucket + "/" + n.pv,
						VolumeAttributes:     map[string]string{"mounter": "s3fs", "capacity": "1073741824"},
						NodePublishSecretRef: &corev1.SecretReference{Name: "s3-creds", Namespace: n.ns}}},
				}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := r.cs.CoreV1().PersistentVolumeClaims(n.ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: n.pv, Namespace: n.ns},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: &sc, VolumeName: n.pv,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{})
			return err
		},
		// The agent acts on a claim only once Bound with the PV's claimRef naming its UID
		// (envtest runs no PV binder).
		func() error { return bindClaim(ctx, r.cs, n.ns, n.pv, n.pv) },
	}
	for _, f := range objs {
		if err := f(); err != nil {
			return fmt.Errorf("seed S3 objects: %w", err)
		}
	}
	return nil
}

func (r *s3Rig) seedPod(ctx context.Context, name string, spec corev1.PodSpec) (*corev1.Pod, error) {
	n := r.names
	spec.NodeName = n.node
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: n.pv}}})
	p, err := r.cs.CoreV1().Pods(n.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: n.ns}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	p.Status.Phase = corev1.PodRunning
	for _, c := range spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name,
			ContainerID: "containerd://" + containerID(c.Name), Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}})
	}
	return r.cs.CoreV1().Pods(n.ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
}

// containerID is the runtime's ID of a container of the bench's pods.
func containerID(name string) string { return name + "-0123456789abcdef" }

// publish does what kubelet and the CSI driver do: vol_data.json, then s3fs at the target (in a
// process group of its own, as a driver's child).
func (r *s3Rig) publish(ctx context.Context, target string) error {
	if err := os.MkdirAll(target, 0o750); err != nil {
		return err
	}
	vd, _ := json.Marshal(map[string]string{"specVolID": r.names.pv, "volumeHandle": s3Bucket + "/" + r.names.pv,
		"driverName": r.driver, "nodeName": r.names.node, "attachmentID": "", "volumeLifecycleMode": "Persistent"})
	if err := os.WriteFile(filepath.Join(filepath.Dir(target), s3mount.VolDataFile), vd, 0o644); err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	m, err := testenv.StartS3fs(mctx, r.srv.S3Config, testenv.S3fsSpec{Source: s3Bucket + ":/" + r.names.pv, MountPoint: target,
		PasswdFile: filepath.Join(r.dir, "driver.passwd"), Options: []string{"allow_other"}, OwnGroup: true})
	if err != nil {
		return fmt.Errorf("driver s3fs: %w", err)
	}
	r.driverMounts = append(r.driverMounts, m)
	return nil
}

// optedIn is a namespace labelled for pvrescue: the agent acts only for pods of such namespaces
// (consent), as the webhook injects only into them.
func optedIn(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{contract.LabelInject: contract.LabelInjectEnabled}}}
}
