package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// Names of the lost-mount scenario (its own namespace, node and StorageClass).
const (
	s3NS     = "bench-s3"
	s3Node   = "bench-s3-node"
	s3Bucket = "bkt"
	s3AK     = "AKIABENCHPVRESCUE"
	s3SK     = "bench-secret-not-logged-0123456789"
	s3SC     = "bench-s3"
	s3PV     = "bench-s3-pv"
)

// quickDeathWindow is a little more than the s3mount Restorer's crash-loop window: an s3fs of its
// own that dies sooner after starting is restarted only after a backoff.
const quickDeathWindow = 11 * time.Second

func runLostMount(ctx context.Context, o *Options) Section {
	s := Section{
		Title: "Agent, lost mount: s3fs killed → mount readable again",
		RanAgainst: "nodeagent/s3mount's Restorer with its real OS (mountinfo, s3fs processes, bind mounts) and the " +
			"shipped default configuration, a real S3 server (bin/versitygw), real s3fs (Debian package), and the " +
			"pod/PV/PVC/Secret/StorageClass in a real kube-apiserver " + KubeVersion + " (envtest). The target " +
			"directory sits in a temporary kubelet directory made a shared mount, as kubelet does.",
	}
	if err := lostMount(ctx, o, &s); err != nil {
		s.Err = err
	}
	return s
}

func lostMount(ctx context.Context, o *Options, s *Section) error {
	if err := requireRoot(); err != nil {
		return err
	}
	gw, err := requireBin(o, "versitygw", "versitygw")
	if err != nil {
		return err
	}
	if _, err := exec.LookPath("s3fs"); err != nil {
		return errors.New("s3fs not found: apt-get install s3fs (make node-deps)")
	}
	restCfg, err := sharedControlPlane.get(o)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pvrescue-bench-s3-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	kubelet, state, s3dir := filepath.Join(dir, "kubelet"), filepath.Join(dir, "state"), filepath.Join(dir, "s3")
	for _, d := range []string{kubelet, state, filepath.Join(s3dir, s3Bucket, s3PV)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	endpoint := "http://127.0.0.1:" + strconv.Itoa(port)
	gwCmd := exec.Command(gw, "--access", s3AK, "--secret", s3SK, "--port", "127.0.0.1:"+strconv.Itoa(port), "posix", s3dir)
	if err := gwCmd.Start(); err != nil {
		return fmt.Errorf("versitygw: %w", err)
	}
	defer func() { _ = gwCmd.Process.Kill(); _ = gwCmd.Wait() }()
	if err := waitUntil(ctx, 15*time.Second, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err == nil
	}); err != nil {
		return fmt.Errorf("versitygw not listening: %w", err)
	}
	// kubelet makes its root directory a shared mount; do the same for the temporary one.
	if err := unix.Mount(kubelet, kubelet, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if err := unix.Mount("", kubelet, "", unix.MS_SHARED, ""); err != nil {
		return err
	}
	defer sweepMounts(dir)

	cfg := config.Default()
	cfg.KubeletDir, cfg.StateDir = kubelet, state
	driver := cfg.S3.Drivers[0]
	pod, err := seedS3(ctx, cs, cfg, driver, endpoint)
	if err != nil {
		return err
	}
	target := s3mount.TargetPath(kubelet, string(pod.UID), s3PV)
	driverProc, err := publishS3(dir, target, driver, endpoint)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(target, "before.txt"), []byte("written before\n"), 0o644); err != nil {
		return err
	}

	rec, stopRec := nodeagent.NewRecorder(cs, s3Node)
	defer stopRec()
	reg := prometheus.NewRegistry()
	view, err := nodeagent.NewKubeView(cs, s3Node, clock.RealClock{}, nodeagent.ViewOptions{})
	if err != nil {
		return err
	}
	vctx, stopView := context.WithCancel(ctx)
	if err := view.Start(vctx); err != nil {
		stopView()
		return err
	}
	defer func() { stopView(); view.Shutdown() }() // Shutdown waits for Start's context to end
	deps := nodeagent.Deps{NodeName: s3Node, Config: cfg, Client: cs, View: view, Recorder: rec,
		Registerer: reg, Clock: clock.RealClock{}}
	r, err := s3mount.New(deps, s3mount.NewOS(), s3mount.NewOptions())
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(cctx) }()
	defer func() {
		cancel()
		<-done
	}()
	time.Sleep(time.Second) // let it see the healthy mount first

	// Phase 1, replay: the node plugin (pvrescue's in-process test plugin running s3fs as its own
	// child, at <kubelet>/plugins/<driver>/csi.sock) answers; each of its s3fs is killed in turn
	// and the agent replays NodePublishVolume. The first run kills the stand-in driver s3fs.
	plugin, err := csitest.Start(csitest.Options{Socket: s3mount.PluginSocket(kubelet, driver), StateDir: filepath.Join(dir, "plugin")})
	if err != nil {
		return err
	}
	defer func() { plugin.KillMounts(); plugin.Stop() }()
	readable := func() bool {
		b, err := os.ReadFile(filepath.Join(target, "before.txt"))
		return err == nil && string(b) == "written before\n"
	}
	measure := func(i int, kill func() error) (time.Duration, error) {
		t0 := time.Now()
		if err := kill(); err != nil {
			return 0, err
		}
		if err := waitUntil(ctx, 5*time.Second, func() bool {
			var st unix.Statfs_t
			return errors.Is(unix.Statfs(target, &st), syscall.ENOTCONN)
		}); err != nil {
			return 0, fmt.Errorf("run %d: mount not dead after kill -9: %w", i, err)
		}
		if err := waitUntil(ctx, 60*time.Second, readable); err != nil {
			return 0, fmt.Errorf("run %d: target not readable again within 60 s: %w", i, err)
		}
		return time.Since(t0), nil
	}
	var replayLat []time.Duration
	for i := 0; i < o.MountRepeats; i++ {
		kill := func() error { plugin.KillMounts(); return nil }
		if i == 0 {
			kill = func() error { return driverProc.Signal(syscall.SIGKILL) }
		}
		d, err := measure(i, kill)
		if err != nil {
			return fmt.Errorf("replay %w", err)
		}
		replayLat = append(replayLat, d)
	}
	replayTTR, replayN, _ := histogram(reg, "pvrescue_s3_time_to_restore_seconds")

	// Phase 2, bridge: the plugin stops answering (its s3fs keeps running until killed, as after a
	// plugin crash); the agent bridges with its own s3fs once the target has been dead for
	// s3.bridgeAfter. The first run kills the plugin's last s3fs, later ones the agent's bridge.
	plugin.Stop()
	staging := filepath.Join(state, "s3", "staging", s3PV)
	var lat []time.Duration
	var restoredAt time.Time
	for i := 0; i < o.MountRepeats; i++ {
		kill := func() error { plugin.KillMounts(); return nil }
		if i > 0 {
			// The agent treats an s3fs of its own that dies within 10 s of starting as a crash loop
			// and backs off before restarting it. A plugin restart kills long-lived mounts, so let
			// each restored mount outlive that window before killing it again.
			if wait := time.Until(restoredAt.Add(quickDeathWindow)); wait > 0 {
				time.Sleep(wait)
			}
			proc, err := findS3fs(ctx, staging)
			if err != nil {
				return fmt.Errorf("run %d: %w", i, err)
			}
			kill = func() error { return proc.Signal(syscall.SIGKILL) }
		}
		d, err := measure(i, kill)
		if err != nil {
			return fmt.Errorf("bridge %w", err)
		}
		lat = append(lat, d)
		restoredAt = time.Now()
	}
	interval := cfg.S3.CheckInterval.Duration
	s.Header = []string{"figure", "samples", "p50", "p99", "max", "baseline: check interval", "p50 ratio", "target"}
	rp50, rp99 := Percentile(replayLat, 50), Percentile(replayLat, 99)
	p50, p99 := Percentile(lat, 50), Percentile(lat, 99)
	s.Rows = [][]string{
		{"replay: s3fs SIGKILL → driver's mount handed back, file readable", fmt.Sprint(len(replayLat)), Ms(rp50), Ms(rp99), Ms(Percentile(replayLat, 100)),
			Ms(interval), Ratio(float64(rp50), float64(interval)), "p50 < 1.5 s: " + Verdict(rp50.Seconds(), 1.5, "s")},
		{"bridge (driver down): s3fs SIGKILL → our s3fs bound, file readable", fmt.Sprint(len(lat)), Ms(p50), Ms(p99), Ms(Percentile(lat, 100)),
			Ms(interval), Ratio(float64(p50), float64(interval)), fmt.Sprintf("p50 < bridgeAfter %s + 3 s: %s", cfg.S3.BridgeAfter.Duration,
				Verdict(p50.Seconds(), cfg.S3.BridgeAfter.Duration.Seconds()+3, "s"))},
	}
	s.Notes = append(s.Notes,
		fmt.Sprintf("Baseline: the agent's own periodic check (%s, the shipped default); a pure poll at that period notices a loss %s later on average, before any repair.", interval, Ms(interval/2)),
		"Replay: the node plugin answers (pvrescue's test plugin, nodeagent/s3mount/csitest, s3fs as its child); the agent replays NodePublishVolume at a fresh directory and binds the driver's new mount over the dead one.",
		fmt.Sprintf("Bridge: the plugin no longer answers; the agent waits s3.bridgeAfter (%s, shipped default) after finding the target dead, then mounts its own s3fs and binds it over. Later bridge runs kill the agent's own s3fs, each after it has lived past the agent's 10 s crash-loop window. Readable means a file written before the loss reads back with its content.", cfg.S3.BridgeAfter.Duration),
		fmt.Sprintf("Check interval %s, statfs timeout %s (shipped defaults).", interval, cfg.S3.StatfsTimeout.Duration))
	if sum, n, ok := histogram(reg, "pvrescue_s3_time_to_restore_seconds"); ok && n > replayN && replayN > 0 {
		rmean := time.Duration(replayTTR / float64(replayN) * float64(time.Second))
		bmean := time.Duration((sum - replayTTR) / float64(n-replayN) * float64(time.Second))
		s.Notes = append(s.Notes, fmt.Sprintf("The agent's histogram pvrescue_s3_time_to_restore_seconds (found dead → restored mount answers): replay mean %s over %d, bridge mean %s over %d; against means from the kill of %s and %s: the difference is the time to notice the loss.",
			Ms(rmean), replayN, Ms(bmean), n-replayN, Ms(meanOf(replayLat)), Ms(meanOf(lat))))
	}
	return nil
}

func meanOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// histogram returns the sum and count of a histogram without labels in reg.
func histogram(reg prometheus.Gatherer, name string) (float64, uint64, bool) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0, false
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleSum(), h.GetSampleCount(), h != nil
		}
	}
	return 0, 0, false
}

func seedS3(ctx context.Context, cs kubernetes.Interface, cfg *config.Config, driver, endpoint string) (*corev1.Pod, error) {
	sc, fs := s3SC, corev1.PersistentVolumeFilesystem
	keys := cfg.S3.SecretKeys
	objs := []func() error{
		func() error {
			_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s3NS}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().Secrets(s3NS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s3-creds", Namespace: s3NS},
				Data: map[string][]byte{keys.AccessKeyID: []byte(s3AK), keys.SecretAccessKey: []byte(s3SK), keys.Endpoint: []byte(endpoint)}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: s3SC}, Provisioner: driver,
				Parameters: map[string]string{"mounter": "s3fs",
					"csi.storage.k8s.io/node-publish-secret-name": "s3-creds", "csi.storage.k8s.io/node-publish-secret-namespace": s3NS}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: s3PV},
				Spec: corev1.PersistentVolumeSpec{
					Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: s3SC, VolumeMode: &fs,
					ClaimRef: &corev1.ObjectReference{Namespace: s3NS, Name: s3PV},
					PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
						Driver: driver, VolumeHandle: s3Bucket + "/" + s3PV,
						VolumeAttributes:     map[string]string{"mounter": "s3fs", "capacity": "1073741824"},
						NodePublishSecretRef: &corev1.SecretReference{Name: "s3-creds", Namespace: s3NS}}},
				}}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := cs.CoreV1().PersistentVolumeClaims(s3NS).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: s3PV, Namespace: s3NS},
				Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: &sc, VolumeName: s3PV,
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{})
			return err
		},
	}
	for _, f := range objs {
		if err := f(); err != nil {
			return nil, fmt.Errorf("seed S3 objects: %w", err)
		}
	}
	p, err := cs.CoreV1().Pods(s3NS).Create(ctx, s3Pod("app", s3PV), metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}
	return cs.CoreV1().Pods(s3NS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
}

func s3Pod(name, claim string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s3NS},
		Spec: corev1.PodSpec{NodeName: s3Node, Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}}}
}

// publishS3 does what kubelet and the CSI driver do: vol_data.json, then s3fs at the target.
func publishS3(dir, target, driver, endpoint string) (*os.Process, error) {
	if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, err
	}
	vd, _ := json.Marshal(map[string]string{"specVolID": s3PV, "volumeHandle": s3Bucket + "/" + s3PV,
		"driverName": driver, "nodeName": s3Node, "attachmentID": "", "volumeLifecycleMode": "Persistent"})
	if err := os.WriteFile(filepath.Join(filepath.Dir(target), s3mount.VolDataFile), vd, 0o644); err != nil {
		return nil, err
	}
	pw := filepath.Join(dir, "driver.passwd")
	if err := os.WriteFile(pw, []byte(s3AK+":"+s3SK+"\n"), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command("s3fs", s3Bucket+":/"+s3PV, target, "-f", "-o", "passwd_file="+pw, "-o", "url="+endpoint,
		"-o", "use_path_request_style", "-o", "allow_other")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("s3fs: %w", err)
	}
	go func() { _ = cmd.Wait() }() // reap it whenever it dies
	if err := waitUntil(context.Background(), 30*time.Second, func() bool {
		var st unix.Statfs_t
		return unix.Statfs(target, &st) == nil && st.Type == unix.FUSE_SUPER_MAGIC
	}); err != nil {
		return nil, fmt.Errorf("driver s3fs not mounted at %s: %w", target, err)
	}
	return cmd.Process, nil
}

var errTimeout = errors.New("timed out")

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return errTimeout
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// s3fsPids lists running s3fs processes whose command line mentions under.
func s3fsPids(under string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if filepath.Base(args[0]) == "s3fs" && strings.Contains(string(b), under) {
			out = append(out, pid)
		}
	}
	return out
}

// findS3fs finds the s3fs serving staging (s3fs rewrites its argv, so match any argument).
func findS3fs(ctx context.Context, staging string) (*os.Process, error) {
	var found *os.Process
	err := waitUntil(ctx, 15*time.Second, func() bool {
		for _, pid := range s3fsPids(staging) {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if slices.Contains(strings.Split(string(b), "\x00"), staging) {
				found, _ = os.FindProcess(pid)
				return true
			}
		}
		return false
	})
	if err != nil {
		return nil, fmt.Errorf("no s3fs serving %s: %w", staging, err)
	}
	return found, nil
}

// sweepMounts kills the s3fs processes serving paths under dir and lazily unmounts everything
// under it, newest first.
func sweepMounts(dir string) {
	for _, pid := range s3fsPids(dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for pass := 0; pass < 20; pass++ {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return
		}
		table, err := s3mount.ParseMountInfo(string(b))
		if err != nil {
			return
		}
		var under []s3mount.MountInfo
		for _, m := range table {
			if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
				under = append(under, m)
			}
		}
		if len(under) == 0 {
			return
		}
		sort.Slice(under, func(i, j int) bool { return under[i].ID > under[j].ID })
		for _, m := range under {
			_ = unix.Unmount(m.MountPoint, unix.MNT_DETACH)
		}
	}
	fmt.Fprintf(os.Stderr, "bench: mounts left under %s\n", dir)
}
