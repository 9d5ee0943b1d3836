//go:build node

package fusewatch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// rcloneMount runs `rclone mount` of a local directory (a second FUSE program beside s3fs,
// another FUSE library: the signal must be the kernel's, not s3fs's) and waits for the mount.
func rcloneMount(t *testing.T) (*exec.Cmd, string) {
	t.Helper()
	bin := testenv.RequireCommand(t, "rclone", "apt-get install rclone")
	dir := t.TempDir()
	src, mnt := filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	for _, d := range []string{src, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "mount", src, mnt, "--config", os.DevNull)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = testenv.LazyUnmount(mnt)
	})
	testenv.WaitFor(t, 30*time.Second, "rclone mount", func() error {
		if ok, fstype := testenv.MountedAt(mnt); !ok || !strings.HasPrefix(fstype, "fuse") {
			return fmt.Errorf("%s not mounted yet", mnt)
		}
		return nil
	})
	return cmd, mnt
}

// A FUSE daemon killed → the watcher wakes within 50 ms, with the periodic rescan at 1 h (so
// nothing but the kernel's signal can have woken it), for s3fs and rclone alike; and the
// kernel names each daemon's connection (fdinfo), so only the holders of mounts are watched.
func TestNodeDaemonKilledWakesWithin50ms(t *testing.T) {
	testenv.RequireRoot(t)
	s3 := testenv.S3(t, "bucket")
	s3fs := testenv.S3fs(t, s3, "bucket")
	rclone, rcloneMnt := rcloneMount(t)

	sys := NewOS(OSOptions{})
	// Polled, not read once: the mount shows before its daemon holds /dev/fuse. rclone mounts
	// through fusermount3, which opens /dev/fuse, mounts and hands the descriptor over a socket;
	// read in between, no process held rclone's connection (seen once in a warm run).
	daemons := []struct {
		name string
		pid  int
		mnt  string
	}{{"s3fs", s3fs.Cmd.Process.Pid, s3fs.MountPoint}, {"rclone", rclone.Process.Pid, rcloneMnt}}
	var (
		holders []Holder
		conns   map[Connection][]Mount
	)
	testenv.WaitFor(t, 10*time.Second, "both daemons holding /dev/fuse", func() error {
		var err error
		if holders, err = sys.Holders(); err != nil {
			return err
		}
		if conns, err = sys.Connections(); err != nil {
			return err
		}
		for _, d := range daemons {
			if !slices.ContainsFunc(holders, func(h Holder) bool { return h.PID == d.pid }) {
				return fmt.Errorf("%s (pid %d) not found holding /dev/fuse; holders: %+v", d.name, d.pid, holders)
			}
		}
		return nil
	})
	t.Logf("/dev/fuse holders: %+v; FUSE connections: %v", holders, conns)
	for _, d := range daemons {
		i := slices.IndexFunc(holders, func(h Holder) bool { return h.PID == d.pid })
		h := &holders[i]
		if len(h.Connections) != 1 || !containsPoint(conns[h.Connections[0]], d.mnt) {
			t.Fatalf("%s: fdinfo named connections %v; mount table %v; want the one mounted at %s", d.name, h.Connections, conns, d.mnt)
		}
	}

	reg := prometheus.NewRegistry()
	exits := make(chan Exit, 4)
	w, err := New(sys, Options{RescanInterval: time.Hour, Registerer: reg, OnExit: func(x Exit) { exits <- x }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(logr.NewContext(context.Background(), testr.NewWithOptions(t, testr.Options{Verbosity: 2})))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	testenv.WaitFor(t, 10*time.Second, "both daemons watched", func() error {
		m, err := testenv.FindMetric(reg, "pvrescue_agent_fuse_daemons_watched", nil)
		if err != nil {
			return err
		}
		if v := testenv.MetricValue(m); v < 2 {
			return fmt.Errorf("%v watched", v)
		}
		return nil
	})

	for _, d := range []struct {
		name string
		pid  int
		mnt  string
	}{{"s3fs", s3fs.Cmd.Process.Pid, s3fs.MountPoint}, {"rclone", rclone.Process.Pid, rcloneMnt}} {
		// Start clean: a wake or exit left from the walks so far must not be taken for this kill.
		drain(w.Wake(), exits)
		start := time.Now()
		if err := syscall.Kill(d.pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var x Exit
		select {
		case x = <-exits:
		case <-time.After(5 * time.Second):
			st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.pid))
			stacks := make([]byte, 1<<20)
			stacks = stacks[:runtime.Stack(stacks, true)]
			t.Fatalf("%s (pid %d) killed: no exit seen within 5 s; its status:\n%.300s\ngoroutines:\n%s", d.name, d.pid, st, stacks)
		}
		select {
		case <-w.Wake():
		case <-time.After(time.Second):
			t.Fatalf("%s: exit seen but no wake", d.name)
		}
		lat := x.At.Sub(start)
		t.Logf("%s (pid %d) killed → exit seen after %v (mount points %v)", d.name, d.pid, lat, x.MountPoints)
		if x.PID != d.pid || !contains(x.MountPoints, d.mnt) {
			t.Fatalf("%s: exit %+v, want pid %d at %s", d.name, x, d.pid, d.mnt)
		}
		if lat > 50*time.Millisecond {
			t.Fatalf("%s killed → exit seen after %v, want ≤ 50ms", d.name, lat)
		}
	}
}

func drain(wake <-chan struct{}, exits chan Exit) {
	for {
		select {
		case <-wake:
		case <-exits:
		default:
			return
		}
	}
}

func containsPoint(ms []Mount, point string) bool {
	for _, m := range ms {
		if m.Point == point {
			return true
		}
	}
	return false
}

func contains(s []string, x string) bool { return slices.Contains(s, x) }
