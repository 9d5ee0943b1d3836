//go:build node

package containermount_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"
)

// BenchmarkRemountInContainers: one pass over a pod of three containers (each in its own mount
// namespace, mountPropagation None), one of them with a read-only subPath as well, after the
// driver's s3fs died and the host target was restored. Between iterations (timer stopped) the
// s3fs serving the target is killed and the target restored again, so every pass finds four
// dead mounts to replace. Reports p50/p99 of the pass next to the mean.
func BenchmarkRemountInContainers(b *testing.B) {
	n := newNode(b)
	names := map[int]string{}
	for i := 1; i <= 3; i++ {
		name := "c" + strconv.Itoa(i)
		root := filepath.Join(n.dir, "ctr-"+name)
		data := filepath.Join(root, "data")
		script := "mount --bind " + n.target + " " + data
		n.mounts(name, vm(data, "", false))
		if i == 2 {
			n.mounts(name, vm(filepath.Join(root, "cfg"), "sub/dir", true))
			cfg := filepath.Join(root, "cfg")
			script += "\nmount --bind " + n.target + "/sub/dir " + cfg + "\nmount -o remount,bind,ro " + cfg
			mustB(b, os.MkdirAll(cfg, 0o755))
		}
		mustB(b, os.MkdirAll(data, 0o755))
		c := n.startContainer(name, "private", script+"\numount "+n.target)
		names[c.pid] = name
	}
	n.kill()
	n.restore()
	r, rec := n.remounter(inPod(names))
	req := n.request("c1", "c2", "c3")
	ctx := context.Background()
	var samples []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if i > 0 {
			// A new death: the previous pass replaced the dead mounts, nothing is left to reset.
			b.StopTimer()
			n.kill()
			n.restore()
			req = n.request("c1", "c2", "c3")
			b.StartTimer()
		}
		t0 := time.Now()
		res, err := r.RemountInContainers(ctx, req)
		samples = append(samples, time.Since(t0))
		if err != nil || len(res.Fixed) != 4 || len(res.Failed) != 0 {
			b.Fatalf("pass %d: %+v, %v; want 4 fixed", i, res, err)
		}
		if ev := drain(rec); len(ev) != 1 { // the fake recorder blocks once its buffer is full
			b.Fatalf("pass %d: events %q, want one", i, ev)
		}
	}
	b.StopTimer()
	sort.Slice(samples, func(i, j int) bool { return samples[i] < samples[j] })
	q := func(p float64) float64 {
		return float64(samples[int(p*float64(len(samples)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.Logf("%d passes: p50 %.2f ms, p99 %.2f ms, max %s", len(samples), q(0.5), q(0.99), samples[len(samples)-1])
}

func mustB(b *testing.B, err error) {
	b.Helper()
	if err != nil {
		b.Fatal(err)
	}
}
