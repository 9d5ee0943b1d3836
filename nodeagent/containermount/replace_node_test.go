//go:build node

package containermount_test

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/mountreplace/mountreplacetest"
	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

var deaths = flag.Int("deaths", 50, "consecutive deaths in TestNodeFiftyDeathsInContainers")

// TestNodeFiftyDeathsInContainers: a pod's volume (a real s3fs on a real S3 server) at its
// target in a shared kubelet-like directory, held by three containers in mount namespaces of
// their own, bound as runc binds them: "htc" mountPropagation HostToContainer (rslave), "none"
// None (private; its main process works inside the volume, so its mount is busy), "sub" a
// read-only subPath (private). Fifty times: kill -9 of the s3fs serving the volume, a new s3fs
// at a fresh directory, the host target replaced beneath (mountreplace, as s3mount will), the
// fresh directory detached, then one RemountInContainers pass. Pollers list every container's
// mount point and the target every millisecond throughout.
func TestNodeFiftyDeathsInContainers(t *testing.T) {
	n := newNode(t)
	n.file("pv1/marker.txt", "bucket marker\n")
	n.file("pv1/sub/dir/submarker.txt", "subdirectory marker\n")
	htc := corev1.MountPropagationHostToContainer
	none := corev1.MountPropagationNone
	type ctr struct {
		name, data string
		c          *container
		ro         bool
		slave      bool
	}
	ctrs := []*ctr{{name: "htc", slave: true}, {name: "none"}, {name: "sub", ro: true}}
	ctrRoot := t.TempDir() // outside the kubelet-like directory, which the containers drop
	testenv.Sweep(t, ctrRoot)
	for _, c := range ctrs {
		c.data = filepath.Join(ctrRoot, "ctr-"+c.name, "data")
		must(t, mountreplacetest.BareDir(c.data))
		src, prop, sub := n.target, "private", ""
		script := []string{}
		switch c.name {
		case "htc":
			prop = "slave"
			script = append(script, "mount --bind "+src+" "+c.data, "mount --make-rslave "+c.data)
			n.mounts(c.name, corev1.VolumeMount{Name: "vol", MountPath: c.data, MountPropagation: &htc})
		case "none":
			script = append(script, "mount --bind "+src+" "+c.data, "mount --make-private "+c.data, "cd "+c.data)
			n.mounts(c.name, corev1.VolumeMount{Name: "vol", MountPath: c.data, MountPropagation: &none})
		case "sub":
			sub = "sub/dir"
			script = append(script, "mount --bind "+src+"/"+sub+" "+c.data, "mount --make-private "+c.data,
				"mount -o remount,bind,ro "+c.data)
			n.mounts(c.name, corev1.VolumeMount{Name: "vol", MountPath: c.data, SubPath: sub, ReadOnly: true})
		}
		// A container's root never shows the kubelet directory.
		script = append(script, "umount -l "+n.dir)
		c.c = n.startContainer(c.name, prop, strings.Join(script, "\n"))
	}
	want := map[string]containermount.Mount{}
	for _, c := range ctrs {
		top, _ := c.c.table(t).Top(c.data)
		want[c.name] = top
	}
	pollers := []*mountreplacetest.Poller{{Name: "target", Path: n.target, Mark: "marker.txt", Value: "bucket marker\n", ListEvery: 20}}
	for _, c := range ctrs {
		p := &mountreplacetest.Poller{Name: c.name, Path: c.c.path(c.data), Mark: "marker.txt", Value: "bucket marker\n", ListEvery: 20}
		if c.name == "sub" {
			p.Mark, p.Value = "submarker.txt", "subdirectory marker\n"
		}
		pollers = append(pollers, p)
	}
	for _, p := range pollers {
		p.Look(0)
		if p.Live != 1 || len(p.Breaches) != 0 {
			t.Fatalf("%s does not read the volume before the first death: %+v", p.Name, p)
		}
	}

	pids := map[int]string{}
	for _, c := range ctrs {
		pids[c.c.pid] = c.name
	}
	// The fake recorder holds 20 Events and blocks the 21st: each pass's Event is taken (and
	// checked) before the next death.
	r, rec := n.remounter(inPod(pids))
	hostK, err := mountreplace.NewKernel("")
	must(t, err)
	t.Cleanup(func() { _ = hostK.Release() })
	host := mountreplace.Replacer{Kernel: hostK, Support: probe()}
	ctx := logr.NewContext(context.Background(), logr.Discard())

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

	var passes, hostTook []time.Duration
	began := time.Now()
	for i := 1; i <= *deaths; i++ {
		if i%10 == 0 {
			t.Logf("death %d at %s", i, time.Since(began).Round(time.Millisecond))
		}
		n.kill()
		fresh := n.newStaging()
		res, err := host.Replace(mountreplace.Request{Target: n.target, Old: topID(t, n.target), LivePath: fresh})
		if err != nil || res.Mode != mountreplace.Beneath {
			t.Fatalf("death %d: host replacement %+v, %v", i, res, err)
		}
		hostTook = append(hostTook, res.Took)
		must(t, unix.Unmount(fresh, unix.MNT_DETACH))
		t0 := time.Now()
		rr, err := r.RemountInContainers(ctx, n.request("htc", "none", "sub"))
		passes = append(passes, time.Since(t0))
		must(t, err)
		if len(rr.Fixed) != 3 || len(rr.Failed) != 0 {
			t.Fatalf("death %d: %+v; want the three containers fixed", i, rr)
		}
		select {
		case e := <-rec.Events:
			if !strings.HasPrefix(e, "Normal "+containermount.ReasonRestored) {
				t.Fatalf("death %d: event %q, want %s", i, e, containermount.ReasonRestored)
			}
		default:
			t.Fatalf("death %d: no %s event", i, containermount.ReasonRestored)
		}
		if len(rec.Events) != 0 {
			t.Fatalf("death %d: %d more events: %q", i, len(rec.Events), <-rec.Events)
		}
		for _, p := range pollers {
			seen := p.LiveNow()
			testenv.WaitFor(t, 10*time.Second, p.Name+" reads the volume again", testenv.Until(func() bool { return p.LiveNow() > seen }))
		}
		if s := hostTable(t).Stack(n.target); len(s) != 1 {
			t.Fatalf("death %d: %d mounts at the host target", i, len(s))
		}
		for _, c := range ctrs {
			if s := c.c.table(t).Stack(c.data); len(s) != 1 {
				t.Fatalf("death %d: %d mounts at %s in %s: %+v", i, len(s), c.data, c.name, s)
			}
		}
	}
	stopPollers()

	for _, c := range ctrs {
		s := c.c.table(t).Stack(c.data)
		got := s[len(s)-1]
		t.Logf("container %-4s after %d deaths: depth %d, root %s, options %v, propagation %v", c.name, *deaths, len(s), got.Root, got.Options, got.Optional)
		if len(s) != 1 || got.Root != want[c.name].Root || got.Dev == want[c.name].Dev {
			t.Errorf("%s: %+v; want one mount of a new connection showing %s", c.name, s, want[c.name].Root)
		}
		if got.ReadOnly() != c.ro || got.HasOption("nosuid") != want[c.name].HasOption("nosuid") || got.HasOption("nodev") != want[c.name].HasOption("nodev") {
			t.Errorf("%s: options %v, were %v", c.name, got.Options, want[c.name].Options)
		}
		if p := mountreplace.PropagationOf(got); p != (mountreplace.Propagation{Slave: c.slave}) {
			t.Errorf("%s: propagation %s (%v), want slave=%v", c.name, p, got.Optional, c.slave)
		}
	}
	if err := os.WriteFile(ctrs[2].c.path(ctrs[2].data)+"/x", []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write into the read-only subPath after %d deaths: %v, want EROFS", *deaths, err)
	}
	must(t, os.WriteFile(ctrs[1].c.path(ctrs[1].data)+"/written", []byte("x\n"), 0o644))
	// The HostToContainer container receives what the host mounts below its target again.
	inner := filepath.Join(n.target, "sub")
	must(t, unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = unix.Unmount(inner, unix.MNT_DETACH) })
	if tab := ctrs[0].c.table(t); !slices.ContainsFunc(tab, func(m containermount.Mount) bool { return m.MountPoint == ctrs[0].data+"/sub" }) {
		t.Errorf("a mount on the host below the target did not propagate into the HostToContainer container")
	}
	for _, p := range pollers {
		t.Logf("poller %-6s: %d live (%d marker reads), %d dead (ENOTCONN), %d errors, %d breaches", p.Name, p.Live, p.Reads, p.Dead, p.Errs, len(p.Breaches))
		if len(p.Breaches) != 0 {
			t.Errorf("poller %s saw something other than the volume or its dead connection: %v", p.Name, p.Breaches[:min(5, len(p.Breaches))])
		}
	}
	reg := prometheus.NewRegistry()
	must(t, reg.Register(r.Metrics().Replace.Replacements))
	count := func(mode, reason string) float64 {
		m, err := testenv.FindMetric(reg, "pvrescue_mount_replace_total", map[string]string{"mode": mode, "reason": reason})
		if errors.Is(err, testenv.ErrNoMetric) {
			return 0
		}
		must(t, err)
		return testenv.MetricValue(m)
	}
	beneath, stacked := count("beneath", ""), 0.0
	for _, reason := range []string{mountreplace.ReasonUnsupported, mountreplace.ReasonRefused, mountreplace.ReasonSubmounts} {
		stacked += count("stacked", reason)
	}
	t.Logf("pvrescue_mount_replace_total: beneath %v, stacked %v", beneath, stacked)
	if beneath != float64(3**deaths) || stacked != 0 {
		t.Errorf("replacements: %v beneath, %v stacked; want %d beneath", beneath, stacked, 3**deaths)
	}
	t.Logf("host replace: p50 %s p99 %s max %s; RemountInContainers pass (3 containers): p50 %s p99 %s max %s",
		mountreplacetest.Percentile(hostTook, 50), mountreplacetest.Percentile(hostTook, 99), mountreplacetest.Percentile(hostTook, 100), mountreplacetest.Percentile(passes, 50), mountreplacetest.Percentile(passes, 99), mountreplacetest.Percentile(passes, 100))
}

func topID(t testing.TB, p string) int {
	t.Helper()
	var stx unix.Statx_t
	must(t, unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_DONT_SYNC|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx))
	return int(stx.Mnt_id)
}
