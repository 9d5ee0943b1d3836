//go:build linux

package fusewatch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The real event source reports a watched process's exit once, and Wait ends with its context.
func TestEventsReportExitOnce(t *testing.T) {
	ev, err := NewOS(OSOptions{}).Events()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ev.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	if err := ev.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = cmd.Process.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	e, err := ev.Wait(ctx)
	if err != nil || len(e.Exited) != 1 || e.Exited[0] != cmd.Process.Pid {
		t.Fatalf("Wait = %+v, %v; want the exit of %d", e, err, cmd.Process.Pid)
	}
	t.Logf("exit seen after %v", time.Since(start))
	<-done
	if err := ev.Add(cmd.Process.Pid); !errors.Is(err, ErrExited) {
		t.Fatalf("Add of a reaped process: %v, want ErrExited", err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	for {
		// The node's mount table may change meanwhile (other mounts); an exit must not come again.
		e, err := ev.Wait(short)
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil || len(e.Exited) > 0 {
			t.Fatalf("Wait after the exit was reported: %+v, %v; want only the context's error", e, err)
		}
	}
}

// A process holding /dev/fuse is found (not yet serving a connection: the kernel names none);
// others are not.
func TestHoldersFindsDevFuse(t *testing.T) {
	holder := exec.Command("sh", "-c", "exec 3</dev/fuse; exec sleep 60")
	other := exec.Command("sleep", "60")
	for _, c := range []*exec.Cmd{holder, other} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		hs, err := NewOS(OSOptions{}).Holders()
		if err != nil {
			t.Fatal(err)
		}
		var found *Holder
		for i := range hs {
			if hs[i].PID == other.Process.Pid {
				t.Fatalf("a process without /dev/fuse listed: %+v", hs[i])
			}
			if hs[i].PID == holder.Process.Pid {
				found = &hs[i]
			}
		}
		if found != nil {
			if found.Connections != nil {
				t.Fatalf("unmounted /dev/fuse descriptor named connections %v", found.Connections)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("holder %d not found in %+v", holder.Process.Pid, hs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A process whose descriptor points to a file named fuse that is not the device is not a
// holder; a walk looks at no more than MaxFDsPerProcess descriptors of a process.
func TestHoldersIgnoresFilesNamedFuse(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "fuse"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	named := exec.Command("sh", "-c", "exec 3<"+filepath.Join(dir, "fuse")+"; exec sleep 60")
	// /dev/fuse as its 40th descriptor or so: beyond a bound of 8, found with the default.
	late := exec.Command("bash", "-c", "for i in $(seq 3 40); do eval \"exec $i</dev/null\"; done; exec 41</dev/fuse; exec sleep 60")
	for _, c := range []*exec.Cmd{named, late} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	}
	find := func(opts OSOptions, pid int) bool {
		hs, err := NewOS(opts).Holders()
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if h.PID == pid {
				return true
			}
		}
		return false
	}
	deadline := time.Now().Add(5 * time.Second)
	for !find(OSOptions{}, late.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatalf("the holder of /dev/fuse as descriptor 41 was not found with the default bound")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if find(OSOptions{}, named.Process.Pid) {
		t.Errorf("a process holding %s/fuse (a plain file) is listed as a /dev/fuse holder", dir)
	}
	if find(OSOptions{MaxFDsPerProcess: 8}, late.Process.Pid) {
		t.Errorf("with MaxFDsPerProcess 8 the walk still reached descriptor 41")
	}
}

// BenchmarkHolders walks the node's processes as a bridge pass's walk does, with 400 extra
// processes (a node with 100 pods has several per pod: pause, the application, probes' execs).
func BenchmarkHolders(b *testing.B) {
	for range 400 {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
	}
	o := NewOS(OSOptions{})
	b.ResetTimer()
	for b.Loop() {
		if _, err := o.Holders(); err != nil {
			b.Fatal(err)
		}
	}
}
