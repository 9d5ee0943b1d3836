package s3fs_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"
)

// Nearing a cap is reported: the share of each limit in use (gauge, the highest of the bridges
// and all together), and on reaching s3.bridgeLimits.warnPercent (80) one Event BridgeNearLimit
// on the Node and one count — again only after the share fell below it.
func TestLimitWatcherReportsNearingACap(t *testing.T) {
	node := s3mounttest.NewFakeNode()
	parent, bridge := "pvrescue/s3", "pvrescue/s3/pv-a-12"
	node.AddCgroup(parent)
	node.AddCgroup(bridge)
	node.AddCgroup(parent + "/not-ours") // not a bridge's name: not read
	cfg := config.Default()
	cfg.S3.BridgeLimits.PerBridge.CPU = resource.MustParse("500m")
	cfg.S3.BridgeLimits.All.CPU = resource.MustParse("1") // per bridge 500m / 512Mi, all 1 / 1Gi
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	rec := record.NewFakeRecorder(10)
	reg := prometheus.NewRegistry()
	w, err := s3fs.NewLimitWatcher(node.Cgroups(), parent, cfg, rec, "node-1", clk, 10*time.Second, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	events := func() []string {
		var out []string
		for {
			select {
			case e := <-rec.Events:
				out = append(out, e)
			default:
				return out
			}
		}
	}
	gauge := func(scope, res string) float64 {
		return seriesValue(t, reg, "pvrescue_s3_bridge_limit_used_ratio", scope, res)
	}
	near := func(scope, res string) float64 {
		return seriesValue(t, reg, "pvrescue_s3_bridge_near_limit_total", scope, res)
	}
	check := func(cpuNanos, mem int64) {
		node.SetUsage(bridge, s3fs.Usage{CPUNanos: cpuNanos, MemoryBytes: mem})
		node.SetUsage(parent, s3fs.Usage{CPUNanos: cpuNanos, MemoryBytes: mem})
		w.Check(ctx)
		clk.Step(10 * time.Second)
	}

	check(0, 100<<20) // memory 20% of 512Mi; no CPU share before a second sample
	if got := gauge(s3fs.ScopeBridge, "memory"); got < 0.19 || got > 0.2 {
		t.Errorf("bridge memory share = %v, want 100Mi/512Mi", got)
	}
	if e := events(); len(e) != 0 {
		t.Errorf("Events below the warning share: %v", e)
	}
	check(4_500_000_000, 100<<20) // 4.5 s of CPU in 10 s: 0.45 core, 90% of 500m (45% of all)
	if got := gauge(s3fs.ScopeBridge, "cpu"); got < 0.89 || got > 0.91 {
		t.Errorf("bridge CPU share = %v, want 0.9", got)
	}
	if got := gauge(s3fs.ScopeAll, "cpu"); got < 0.44 || got > 0.46 {
		t.Errorf("all bridges' CPU share = %v, want 0.45", got)
	}
	e := events()
	if len(e) != 1 || !strings.Contains(e[0], contract.ReasonBridgeNearLimit) || !strings.Contains(e[0], "90% of its limit of 500m CPU (s3.bridgeLimits.perBridge.cpu)") {
		t.Fatalf("Events = %v, want one %s on the bridge's CPU", e, contract.ReasonBridgeNearLimit)
	}
	if got := near(s3fs.ScopeBridge, "cpu"); got != 1 {
		t.Errorf("near_limit_total{bridge,cpu} = %v, want 1", got)
	}
	check(9_000_000_000, 100<<20) // still 90%: no second report
	if e := events(); len(e) != 0 {
		t.Errorf("a second Event while the share stays high: %v", e)
	}
	check(9_500_000_000, 900<<20) // CPU down to 10%; memory 900Mi: 176% of one bridge's, 88% of all's
	e = events()
	if len(e) != 2 {
		t.Fatalf("Events = %v, want two: the bridge's and all bridges' memory", e)
	}
	if got := near(s3fs.ScopeAll, "memory"); got != 1 {
		t.Errorf("near_limit_total{all,memory} = %v, want 1", got)
	}
	check(14_000_000_000, 100<<20) // CPU at 90% again after falling below: reported again
	if e := events(); len(e) != 1 || !strings.Contains(e[0], "cpu") && !strings.Contains(e[0], "CPU") {
		t.Errorf("Events after the CPU share rose again = %v, want one", e)
	}
	if got := near(s3fs.ScopeBridge, "cpu"); got != 2 {
		t.Errorf("near_limit_total{bridge,cpu} = %v, want 2", got)
	}
}

// seriesValue is the value of the series of name with labels scope and resource in reg.
func seriesValue(t *testing.T, reg *prometheus.Registry, name, scope, res string) float64 {
	t.Helper()
	m, err := testenv.FindMetric(reg, name, map[string]string{"scope": scope, "resource": res})
	if err != nil {
		t.Fatalf("series %s{scope=%q,resource=%q}: %v", name, scope, res, err)
	}
	return m.GetGauge().GetValue() + m.GetCounter().GetValue()
}
