package s3mount

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Never abort our own bridge: with s3.abortHungAfter set, a bridged target that stops answering
// (its s3fs busy with a tenant's writes) is judged by the bridge's own health — its s3fs runs —
// and its connection is never aborted, however long it stays slow; nothing is started, replaced
// or stacked, and when it answers again the same bridge serves the target.
func TestHungBridgeIsNeverAborted(t *testing.T) {
	w := newWorld(t, standard(false)...)
	w.configure = func(c *config.Config) { c.S3.AbortHungAfter.Duration = time.Minute }
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	w.waitFor("the bridge bound on the dead target", func() bool {
		top, ok := w.node.Table().Top(target)
		return ok && top.Source == stack.FSName("pv-a") && fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second) == nil
	})
	started := len(w.node.Started())
	before := w.node.Table().Stack(target)
	bridge, _ := w.node.Table().Top(target)

	w.node.Hang(target) // the bridge's connection: its bind and its own mount answer late
	for range 20 {      // 5 minutes, five times abortHungAfter
		w.clock.Step(15 * time.Second)
		w.sync()
	}
	if got := w.node.Aborted(); len(got) != 0 {
		t.Fatalf("aborted %v: the bridge's own connection (device %s) was aborted; every pod on the PV would get ENOTCONN", got, bridge.Dev)
	}
	if n := len(w.node.Started()); n != started {
		t.Errorf("started %d more s3fs while the bridge was slow", n-started)
	}
	if p := w.node.Processes(); len(p) == 0 || p[len(p)-1].Exited() {
		t.Errorf("the bridge's s3fs does not run any more")
	}
	if after := w.node.Table().Stack(target); !slices.Equal(sources(after), sources(before)) {
		t.Errorf("target stack changed while the bridge was slow: %v → %v", sources(before), sources(after))
	}
	if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonMountHung, "S3 volume pv-a, served by pvrescue's bridge"); n != 1 {
		t.Errorf("%d MountHung Events naming the bridge, want 1; events: %v", n, w.events.All())
	}
	if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonMountHungAborted, ""); n != 0 {
		t.Errorf("%d MountHungAborted Events for the bridge", n)
	}
	if got := value(t, w.r.Metrics().HungAborts.WithLabelValues("success")); got != 0 {
		t.Errorf("hung_aborts{success} = %v, want 0", got)
	}
	w.node.Resume(target)
	w.sync()
	if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
		t.Errorf("target after the bridge answers again: %v", err)
	}
	if top, _ := w.node.Table().Top(target); top.Dev != bridge.Dev {
		t.Errorf("top at the target is %+v after the bridge answered again, want the same bridge %s", top, bridge.Dev)
	}
}
