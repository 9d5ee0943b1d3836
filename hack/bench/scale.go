package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/pvrescue/pvrescue/internal/config"
)

const (
	scalePVs  = 500
	scalePods = 200
	// clockTicks is USER_HZ, 100 on every Linux architecture Go supports for /proc/<pid>/stat.
	clockTicks = 100
)

func runScale(ctx context.Context, o *Options) Section {
	s := Section{
		Title: "Agent at scale: idle CPU and memory",
		RanAgainst: fmt.Sprintf("the built bin/pvrescue-agent as its own process against a real kube-apiserver %s (envtest) "+
			"holding %d local block PVs bound to its node (paths present) and %d running pods with S3 volumes (PV+PVC each) "+
			"on its node; the node's fake-device label is off and stateDir/kubeletDir are temporary directories, so the "+
			"agent creates nothing on the host. Baseline: the same binary at the same time for an empty node.", KubeVersion, scalePVs, scalePods),
	}
	if err := scale(ctx, o, &s); err != nil {
		s.Err = err
	}
	return s
}

type agentProc struct {
	name string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan struct{}
}

func scale(ctx context.Context, o *Options, s *Section) error {
	bin, err := requireBin(o, "pvrescue-agent", "bench")
	if err != nil {
		return err
	}
	kc, err := sharedControlPlane.kubeconfig(o)
	if err != nil {
		return err
	}
	restCfg, err := sharedControlPlane.get(o)
	if err != nil {
		return err
	}
	restCfg.QPS, restCfg.Burst = 200, 400
	cs, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "pvrescue-bench-scale-")
	if err != nil {
		return err
	}
	// The agents' S3 restorers mount a tmpfs for credentials under their state dirs and leave it
	// (by design, for the next agent): unmount everything under tmp once they have stopped.
	defer func() {
		sweepMounts(tmp)
		_ = os.RemoveAll(tmp)
	}()
	// The agent only accepts local paths under /dev: give it present ones there, in a directory
	// of the bench's own, removed afterwards (symlinks to /dev/null; nothing reads them).
	devDir, err := os.MkdirTemp("/dev", "pvrescue-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(devDir)

	cfg := config.Default()
	const busy, idle = "bench-scale-node", "bench-scale-empty"
	for _, n := range []string{busy, idle} {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
			Labels: map[string]string{corev1.LabelHostname: n}}}, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create node %s: %w", n, err)
		}
	}
	seedStart := time.Now()
	if err := seedScale(ctx, cs, cfg, busy, devDir); err != nil {
		return err
	}
	seedTook := time.Since(seedStart)

	kcPath := filepath.Join(tmp, "kubeconfig")
	if err := os.WriteFile(kcPath, kc, 0o600); err != nil {
		return err
	}
	var agents []*agentProc
	for _, n := range []string{busy, idle} {
		ac := config.Default()
		ac.StateDir, ac.KubeletDir = filepath.Join(tmp, n, "state"), filepath.Join(tmp, n, "kubelet")
		for _, d := range []string{ac.StateDir, ac.KubeletDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		b, err := yaml.Marshal(ac)
		if err != nil {
			return err
		}
		cp := filepath.Join(tmp, n+".yaml")
		if err := os.WriteFile(cp, b, 0o600); err != nil {
			return err
		}
		a := &agentProc{name: n, log: &bytes.Buffer{}, done: make(chan struct{})}
		a.cmd = exec.Command(bin, "--kubeconfig", kcPath, "--config", cp, "--node-name", n,
			"--metrics-bind-address", "0", "--health-probe-bind-address", "0")
		a.cmd.Stdout, a.cmd.Stderr = a.log, a.log
		if err := a.cmd.Start(); err != nil {
			return fmt.Errorf("start agent: %w", err)
		}
		go func() { _ = a.cmd.Wait(); close(a.done) }()
		defer func() {
			_ = a.cmd.Process.Signal(os.Interrupt)
			select {
			case <-a.done:
			case <-time.After(10 * time.Second):
				_ = a.cmd.Process.Kill()
				<-a.done
			}
		}()
		agents = append(agents, a)
	}
	const settle = 10 * time.Second
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	type sample struct {
		ticks0, ticks1 uint64
		rss            []int64
	}
	samples := make([]sample, len(agents))
	read := func(a *agentProc) (uint64, int64, error) {
		select {
		case <-a.done:
			return 0, 0, fmt.Errorf("agent for %s exited: %s", a.name, tail(a.log.String(), 600))
		default:
		}
		pid := a.cmd.Process.Pid
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, 0, err
		}
		ut, stt, err := ParseProcStat(string(st))
		if err != nil {
			return 0, 0, err
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return 0, 0, err
		}
		rss, err := ParseVmRSS(string(status))
		return ut + stt, rss, err
	}
	start := time.Now()
	for i, a := range agents {
		t, r, err := read(a)
		if err != nil {
			return err
		}
		samples[i].ticks0, samples[i].rss = t, []int64{r}
	}
	for time.Since(start) < o.ScaleSample {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		for i, a := range agents {
			t, r, err := read(a)
			if err != nil {
				return err
			}
			samples[i].ticks1 = t
			samples[i].rss = append(samples[i].rss, r)
		}
	}
	el := time.Since(start)
	cpu := func(i int) float64 {
		return float64(samples[i].ticks1-samples[i].ticks0) / clockTicks / el.Seconds() * 100
	}
	maxRSS := func(i int) int64 {
		m := int64(0)
		for _, r := range samples[i].rss {
			m = max(m, r)
		}
		return m
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	s.Header = []string{"agent", "samples", "CPU % of one core", "max RSS", "vs empty node (CPU / RSS)", "target CPU < 2 %", "target RSS < 50 MiB"}
	s.Rows = [][]string{
		{fmt.Sprintf("%d PVs + %d S3 pods", scalePVs, scalePods), fmt.Sprint(len(samples[0].rss)), fmt.Sprintf("%.2f %%", cpu(0)), fmt.Sprintf("%.1f MiB", mib(maxRSS(0))),
			Ratio(cpu(0), cpu(1)) + " / " + Ratio(float64(maxRSS(0)), float64(maxRSS(1))), Verdict(cpu(0), 2, "%"), Verdict(mib(maxRSS(0)), 50, "MiB")},
		{"empty node (baseline)", fmt.Sprint(len(samples[1].rss)), fmt.Sprintf("%.2f %%", cpu(1)), fmt.Sprintf("%.1f MiB", mib(maxRSS(1))), "1.00×", "—", "—"},
	}
	s3 := "the agent binary of this run does not start the S3 restorer (no \"watching S3 volume mounts\" in its log): the 200 S3 pods are cached by its pod informer only"
	if strings.Contains(agents[0].log.String(), "watching S3 volume mounts") {
		s3 = "the agent's S3 restorer was running (its start line is in the log)"
	}
	s.Notes = append(s.Notes,
		fmt.Sprintf("Objects created in %s; the agents started after that, settled for %s, then /proc/<pid>/stat (utime+stime, USER_HZ %d) and /proc/<pid>/status (VmRSS) were read every second for %s.", seedTook.Round(time.Second), settle, clockTicks, el.Round(time.Second)),
		"Note: "+s3+".",
		fmt.Sprintf("Both agents run with the shipped defaults (local-disk resync %s, S3 check interval %s); idle CPU is mostly those periodic passes over every watched volume.", cfg.LocalBlock.ResyncPeriod.Duration, cfg.S3.CheckInterval.Duration))
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// seedScale creates the PVs (present paths under devDir) and the S3 pods of node, 8 at a time.
func seedScale(ctx context.Context, cs kubernetes.Interface, cfg *config.Config, node, devDir string) error {
	const ns = "bench-scale"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	var jobs []func() error
	for i := 0; i < scalePVs; i++ {
		path := filepath.Join(devDir, fmt.Sprintf("disk-%d", i))
		if err := os.Symlink("/dev/null", path); err != nil {
			return err
		}
		jobs = append(jobs, func() error {
			return createLocalPV(ctx, cs, fmt.Sprintf("bench-scale-local-%d", i), path, node, cfg.LocalBlock.StorageClasses[0])
		})
	}
	driver := cfg.S3.Drivers[0]
	for i := 0; i < scalePods; i++ {
		jobs = append(jobs, func() error { return createS3Pod(ctx, cs, ns, node, driver, i) })
	}
	ch := make(chan func() error)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if err := j(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("seed: %d errors, first: %w", len(errs), errs[0])
	}
	return nil
}

func createS3Pod(ctx context.Context, cs kubernetes.Interface, ns, node, driver string, i int) error {
	name := fmt.Sprintf("bench-scale-s3-%d", i)
	sc, fs := "bench-scale-s3", corev1.PersistentVolumeFilesystem
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:    corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: sc, VolumeMode: &fs,
			ClaimRef: &corev1.ObjectReference{Namespace: ns, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: driver, VolumeHandle: "bkt/" + name, VolumeAttributes: map[string]string{"mounter": "s3fs"}}},
		}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().PersistentVolumeClaims(ns).Create(ctx, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteMany}, StorageClassName: &sc, VolumeName: name,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}}}}
	p, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	p.Status.Phase = corev1.PodRunning
	_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}
