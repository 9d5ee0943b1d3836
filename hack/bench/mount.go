package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

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
	const before = "written before\n"
	r, err := newS3Rig(ctx, o, s3RigOptions{names: newS3Names("bench-s3"),
		pod:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "busybox"}}},
		files: map[string]string{"before.txt": before}})
	if err != nil {
		return err
	}
	defer r.close()
	readable := func() bool { return readsBack(filepath.Join(r.target, "before.txt"), before) }
	measure := func(i int, kill func() error) (time.Duration, error) {
		r.dephase(ctx)
		t0 := time.Now()
		if err := kill(); err != nil {
			return 0, err
		}
		if err := r.waitDead(ctx); err != nil {
			return 0, fmt.Errorf("run %d: mount not dead after kill -9: %w", i, err)
		}
		if err := testenv.WaitUntil(ctx, restoreTimeout, benchPoll, readable); err != nil {
			return 0, fmt.Errorf("run %d: target not readable again within %s: %w", i, restoreTimeout, err)
		}
		return time.Since(t0), nil
	}

	// Phase 1, replay: the node plugin (pvrescue's in-process test plugin running s3fs as its own
	// child, at <kubelet>/plugins/<driver>/csi.sock) is restarted: its s3fs die, a new plugin
	// serves the socket, and the agent replays NodePublishVolume through it.
	var replayLat []time.Duration
	for i := 0; i < o.MountRepeats; i++ {
		d, err := measure(i, r.restartPlugin)
		if err != nil {
			return fmt.Errorf("replay %w", err)
		}
		replayLat = append(replayLat, d)
	}
	replayTTR, replayN, _ := histogram(r.reg, "pvrescue_s3_time_to_restore_seconds")

	// Phase 2, bridge: a plugin restart after which the plugin stays down: its s3fs die and it
	// no longer answers; the agent bridges with its own s3fs once the target has been dead for
	// s3.bridgeAfter. Then the plugin comes back and the agent hands the volume back to the
	// driver's mount and retires the bridge (timed too), which sets up the next run.
	staging := filepath.Join(r.state, "s3", "staging", r.names.pv)
	var lat, handBack []time.Duration
	for i := 0; i < o.MountRepeats; i++ {
		d, err := measure(i, func() error { r.plugin.KillMounts(); r.stopPlugin(); return nil })
		if err != nil {
			return fmt.Errorf("bridge %w", err)
		}
		lat = append(lat, d)
		if len(testenv.S3fsPIDs(staging)) == 0 {
			return fmt.Errorf("bridge run %d: readable again, but no s3fs of the agent's serves %s", i, staging)
		}
		t0 := time.Now()
		if err := r.startPlugin(); err != nil {
			return err
		}
		if err := testenv.WaitUntil(ctx, restoreTimeout, benchPoll, func() bool {
			return len(testenv.S3fsPIDs(staging)) == 0 && len(r.plugin.Pids()) > 0 && readable()
		}); err != nil {
			return fmt.Errorf("bridge run %d: plugin back, but the volume is not on the driver's mount with the bridge gone within %s: %w", i, restoreTimeout, err)
		}
		handBack = append(handBack, time.Since(t0))
	}
	s.Raw = RawSamples([]string{"replay", "bridge", "hand-back"}, map[string][]time.Duration{"replay": replayLat, "bridge": lat, "hand-back": handBack})
	cfg := r.cfg
	interval := cfg.S3.CheckInterval.Duration
	s.Header = []string{"figure", "samples", "p50", "p99", "max", "baseline: check interval", "p50 ratio", "target"}
	rp50, rp99 := Percentile(replayLat, 50), Percentile(replayLat, 99)
	p50, p99 := Percentile(lat, 50), Percentile(lat, 99)
	s.Rows = [][]string{
		{"replay: plugin restarted → driver's mount handed back, file readable", fmt.Sprint(len(replayLat)), Ms(rp50), Ms(rp99), Ms(Percentile(replayLat, 100)),
			Ms(interval), Ratio(float64(rp50), float64(interval)), "p50 < 1.5 s: " + Verdict(rp50.Seconds(), 1.5, "s")},
		{"bridge: plugin restarted but kept down → our s3fs bound, file readable", fmt.Sprint(len(lat)), Ms(p50), Ms(p99), Ms(Percentile(lat, 100)),
			Ms(interval), Ratio(float64(p50), float64(interval)), fmt.Sprintf("p50 < bridgeAfter %s + 3 s: %s", cfg.S3.BridgeAfter.Duration,
				Verdict(p50.Seconds(), cfg.S3.BridgeAfter.Duration.Seconds()+3, "s"))},
		{"hand-back: plugin back → driver's mount in place, bridge retired, file readable", fmt.Sprint(len(handBack)), Ms(Percentile(handBack, 50)), Ms(Percentile(handBack, 99)), Ms(Percentile(handBack, 100)),
			Ms(interval), Ratio(float64(Percentile(handBack, 50)), float64(interval)), "—"},
	}
	s.Notes = append(s.Notes,
		fmt.Sprintf("Baseline: the agent's own periodic check (%s, the shipped default); a pure poll at that period notices a loss %s later on average, before any repair.", interval, Ms(interval/2)),
		"Replay: a plugin restart as the bench makes it — every s3fs of the driver SIGKILLed (the first run kills the s3fs the bench published as the driver's), the node plugin (pvrescue's test plugin, nodeagent/s3mount/csitest, s3fs as its child) stops serving and a new one serves the same socket at once; the agent replays NodePublishVolume at a fresh directory and binds the driver's new mount over the dead one. A real plugin's own restart time (image, container start) comes on top.",
		fmt.Sprintf("Bridge: the same plugin restart, but the plugin does not come back; the agent waits s3.bridgeAfter (%s, shipped default) after finding the target dead, then mounts its own s3fs and binds it over. Hand-back: the plugin then serves again; timed until no s3fs of the agent's is left and the file reads back through the driver's new mount. Readable means a file written before the loss reads back with its content.", cfg.S3.BridgeAfter.Duration),
		fmt.Sprintf("Check interval %s, statfs timeout %s (shipped defaults); the bench polls the file every %s. Before each loss the bench waits a random time in [0, check interval), so losses fall at random points of the agent's periodic check (back to back, each would come just after the check that restored the last one).", interval, cfg.S3.StatfsTimeout.Duration, benchPoll))
	if sum, n, ok := histogram(r.reg, "pvrescue_s3_time_to_restore_seconds"); ok && n > replayN && replayN > 0 {
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

// histogram returns the sum and count of the first series of histogram name in reg.
func histogram(reg prometheus.Gatherer, name string) (float64, uint64, bool) {
	m, err := testenv.FindMetric(reg, name, nil)
	if err != nil || m.GetHistogram() == nil {
		return 0, 0, false
	}
	return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount(), true
}
