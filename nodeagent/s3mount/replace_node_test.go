//go:build node

package s3mount_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/mountreplace/mountreplacetest"
)

var kubeletDeaths = flag.Int("kubelet-deaths", 50, "consecutive deaths in TestNodeReplaceAtKubeletPaths")

// TestNodeReplaceAtKubeletPaths: a staging driver (s3fs at kubelet's globalmount, a bind of it at
// the pod's target) whose s3fs is killed -9 fifty times in a row. Each time the agent replays
// NodeStageVolume and NodePublishVolume at fresh directories and puts each result beneath the
// dead mount at kubelet's path, then detaches the dead one: after every death the globalmount and
// the target hold exactly one mount, and readers looking every millisecond at both never see
// the bare directory (its decoy file), only the volume or its dead connection.
func TestNodeReplaceAtKubeletPaths(t *testing.T) {
	if s := mountreplace.NodeSupport(); !s.Beneath {
		t.Fatalf("this kernel must mount beneath (Linux >= 6.5): %v", s.Err)
	}
	e := newNodeEnv(t)
	// The target holds the decoy before anything is mounted on it (s3fs refuses a globalmount
	// that is not empty: there the bare directory shows as the marker missing).
	plugin, staging, target := e.stagedPod("pv-rp", "app-rp", func(target string) { must(t, mountreplacetest.BareDir(target)) })
	const value = "written before\n"
	must(t, os.WriteFile(filepath.Join(target, "marker.txt"), []byte(value), 0o644))

	pollers := []*mountreplacetest.Poller{{Name: "staging", Path: staging, Mark: "marker.txt", Value: value, ListEvery: 20},
		{Name: "target", Path: target, Mark: "marker.txt", Value: value, ListEvery: 20}}
	for _, p := range pollers {
		waitFor(t, 10*time.Second, p.Name+" reads the volume before the first death", func() bool {
			p.Look(0)
			return p.Live > 0
		})
		p.Reset()
	}

	r, _ := e.agent(30 * time.Second)
	pctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, p := range pollers {
		wg.Go(func() { p.Run(pctx) })
	}
	stopped := false
	stopPollers := func() {
		if !stopped {
			stopped = true
			stop()
			wg.Wait()
		}
	}
	defer stopPollers()

	var outage []time.Duration
	began := time.Now()
	for i := 1; i <= *kubeletDeaths; i++ {
		if i%10 == 0 {
			t.Logf("death %d at %s", i, time.Since(began).Round(time.Millisecond))
		}
		held, _ := mountTable().Top(target) // what a container (mountPropagation None) holds
		asks := e.remount.asks()
		served := map[string]uint64{staging: topMountID(staging), target: topMountID(target)}
		plugin.KillMounts()
		killed := time.Now()
		// Readable again (an open reaches the daemon; cached attributes alone do not count) at
		// both paths, with the plugin's new s3fs behind them.
		waitFor(t, 30*time.Second, fmt.Sprintf("death %d: globalmount and target read the volume again", i), func() bool {
			for _, p := range []string{staging, target} {
				if b, err := os.ReadFile(filepath.Join(p, "marker.txt")); err != nil || string(b) != value || !restoredSince(p, served[p]) {
					return false
				}
			}
			return len(plugin.Pids()) == 1
		})
		outage = append(outage, time.Since(killed))
		for _, p := range []string{staging, target} {
			if s := stackAt(p); len(s) != 1 {
				t.Fatalf("death %d: %d mounts at %s: %+v", i, len(s), p, s)
			}
		}
		waitFor(t, 5*time.Second, fmt.Sprintf("death %d: container remounter asked about the dead device %s", i, held.Dev), func() bool { return e.remount.askedSince(asks, held.Dev) })
	}
	stopPollers()

	for _, p := range []string{staging, target} {
		s := stackAt(p)
		t.Logf("%s after %d deaths: depth %d, top %s %s %v %v", p, *kubeletDeaths, len(s), s[len(s)-1].FSType, s[len(s)-1].Source, s[len(s)-1].Options, s[len(s)-1].Optional)
	}
	for _, p := range pollers {
		t.Logf("poller %-7s: %d live (%d marker reads), %d dead (ENOTCONN), %d errors, %d breaches", p.Name, p.Live, p.Reads, p.Dead, p.Errs, len(p.Breaches))
		if len(p.Breaches) != 0 {
			t.Errorf("poller %s saw something other than the volume or its dead connection: %v", p.Name, p.Breaches[:min(5, len(p.Breaches))])
		}
	}
	beneath := counterValue(t, r.Metrics().Replace.Replacements.WithLabelValues(string(mountreplace.Beneath), ""))
	var stacked float64
	for _, reason := range []string{mountreplace.ReasonUnsupported, mountreplace.ReasonRefused, mountreplace.ReasonSubmounts} {
		stacked += counterValue(t, r.Metrics().Replace.Replacements.WithLabelValues(string(mountreplace.Stacked), reason))
	}
	t.Logf("pvrescue_mount_replace_total: beneath %v, stacked %v; kill to both paths readable: p50 %s p99 %s max %s",
		beneath, stacked, mountreplacetest.Percentile(outage, 50), mountreplacetest.Percentile(outage, 99), mountreplacetest.Percentile(outage, 100))
	if beneath != float64(2**kubeletDeaths) || stacked != 0 {
		t.Errorf("replacements: %v beneath, %v stacked; want %d beneath (globalmount and target per death)", beneath, stacked, 2**kubeletDeaths)
	}
}
