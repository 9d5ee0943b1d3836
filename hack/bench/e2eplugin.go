package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// hostReplay holds the lost-mount section's replay samples (the in-process plugin on the host),
// for the containerized plugin's section to stand beside; nil when that section did not run.
var hostReplay []time.Duration

// pluginBenchResult mirrors e2e/scenarios.PluginBenchResult (the e2e module's test package
// cannot be imported).
type pluginBenchResult struct {
	Layout       string    `json:"layout"`
	Driver       string    `json:"driver"`
	ReadableMs   []float64 `json:"readableMs"`
	DeadMs       []float64 `json:"deadMs"`
	RegisteredMs []float64 `json:"registeredMs"`
	SetupSeconds float64   `json:"setupSeconds"`
	GraceSeconds int64     `json:"graceSeconds"`
}

func runE2EPlugin(ctx context.Context, o *Options) Section {
	s := Section{
		Title: "Agent, lost mount with the plugin in a container: plugin pod deleted → readable again",
		RanAgainst: "the e2e suite's single-node cluster (kube-apiserver, controller-manager, scheduler, kubelet " + KubeVersion +
			", containerd) with pvrescue installed from manifests/ (webhook Deployment, agent DaemonSet, shipped config), " +
			"a real S3 server (versitygw) and the test CSI plugin running as a DaemonSet pod with the mounts of k8s-csi-s3's " +
			"upstream node manifest (yandex layout: s3fs at kubelet's staging path, a bind per target, s3fs as the plugin's " +
			"child in its container). Run by `make bench` as e2e/scenarios' BenchmarkPluginPodDeleted (its own cluster, " +
			"brought up and torn down by it).",
	}
	if err := e2ePlugin(ctx, o, &s); err != nil {
		s.Err = err
	}
	return s
}

func e2ePlugin(ctx context.Context, o *Options, s *Section) error {
	if err := requireRoot(); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "pvrescue-bench-e2e-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }() // best effort: a temporary directory
	out := filepath.Join(tmp, "result.json")
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-tags", "e2e", "-run", "^$",
		"-bench", "^BenchmarkPluginPodDeleted$", "-benchtime", "1x", "-timeout", "20m", "./scenarios/")
	cmd.Dir = filepath.Join(o.Root, "e2e")
	cmd.Env = append(os.Environ(), "PVRESCUE_BENCH_OUT="+out, fmt.Sprintf("PVRESCUE_BENCH_REPEATS=%d", o.E2ERepeats))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	started := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go test -bench BenchmarkPluginPodDeleted (in e2e/): %w\n%s", err, tail(log.String(), 3000))
	}
	took := time.Since(started)
	b, err := os.ReadFile(out)
	if err != nil {
		return fmt.Errorf("the e2e benchmark wrote no result: %w\n%s", err, tail(log.String(), 2000))
	}
	var r pluginBenchResult
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("parse %s: %w", out, err)
	}
	toDur := func(ms []float64) []time.Duration {
		ds := make([]time.Duration, len(ms))
		for i, m := range ms {
			ds[i] = time.Duration(m * float64(time.Millisecond))
		}
		return ds
	}
	readable, dead, registered := toDur(r.ReadableMs), toDur(r.DeadMs), toDur(r.RegisteredMs)
	s.Raw = RawSamples([]string{"containerized-readable", "containerized-dead", "containerized-registered", "host-replay"},
		map[string][]time.Duration{"containerized-readable": readable, "containerized-dead": dead, "containerized-registered": registered, "host-replay": hostReplay})
	s.Header = []string{"figure", "samples", "p50", "p99", "max", "p50 / p99 ratio to the host plugin's replay"}
	ratio := func(xs []time.Duration) string {
		if len(hostReplay) == 0 {
			return "— (lost-mount section not run)"
		}
		return Ratio(float64(Percentile(xs, 50)), float64(Percentile(hostReplay, 50))) + " / " + Ratio(float64(Percentile(xs, 99)), float64(Percentile(hostReplay, 99)))
	}
	row := func(name string, xs []time.Duration, withRatio bool) []string {
		rt := "—"
		if withRatio {
			rt = ratio(xs)
		}
		return []string{name, fmt.Sprint(len(xs)), Ms(Percentile(xs, 50)), Ms(Percentile(xs, 99)), Ms(Percentile(xs, 100)), rt}
	}
	s.Rows = [][]string{
		row("containerized plugin: pod deleted → the node's target reads the file again", readable, true),
		row("  of which: pod deleted → the target dead (ENOTCONN)", dead, false),
		row("  for comparison: pod deleted → the DaemonSet's new plugin pod ready", registered, false),
	}
	if len(hostReplay) > 0 {
		s.Rows = append(s.Rows, row("host plugin (lost-mount section, this run): plugin restarted → readable", hostReplay, true))
	}
	s.Notes = append(s.Notes,
		fmt.Sprintf("Each run deletes the plugin's pod (grace period %d s) and polls `<pod target>/app.txt` on the node every 10 ms: first until it answers ENOTCONN (the s3fs died with the container), then until it reads the file again (the DaemonSet's new pod registered, the agent replayed NodeStageVolume/NodePublishVolume through it and put the driver's new mounts in place of the dead ones at the staging path and the target: beneath them, the dead ones then detached, as the agent deployed from manifests/ does on this kernel with its container remounter on). The next run starts 1 s after the new plugin pod is ready.", r.GraceSeconds),
		"The containerized figure includes what the host plugin's does not: the pod's termination, the DaemonSet controller creating a new pod, kubelet starting its sandbox and two containers, and the registrar registering the plugin again. The ratio says how much of the user-visible outage is the plugin's own restart rather than the agent.",
		fmt.Sprintf("Cluster bring-up and pvrescue install (no cert-manager: package certs makes the webhook's certificate) took %s of the section's %s.", time.Duration(r.SetupSeconds*float64(time.Second)).Round(time.Second), took.Round(time.Second)))
	return nil
}
