//go:build node

package mountreplace_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/mountreplace/mountreplacetest"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// onThread runs f on a locked OS thread that is not the main thread and is never unlocked, so
// the runtime retires it with its changed namespace (the agent passes its own such helper).
func onThread(f func()) {
	runtime.LockOSThread()
	if unix.Gettid() != unix.Getpid() {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer close(done)
		f()
	}()
	<-done
	runtime.UnlockOSThread()
}

// inNamespace runs f in the mount namespace of pid, on a thread of its own.
func inNamespace(pid int, f func() error) error {
	errc := make(chan error, 1)
	go onThread(func() {
		errc <- func() error {
			if err := unix.Unshare(unix.CLONE_FS); err != nil {
				return err
			}
			own, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer func() { _ = unix.Close(own) }() // a descriptor we only read through: nothing is lost on close
			ns, err := unix.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer func() { _ = unix.Close(ns) }() // a descriptor we only read through: nothing is lost on close
			if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("setns: %w", err)
			}
			defer func() { _ = unix.Setns(own, unix.CLONE_NEWNS) }()
			return f()
		}()
	})
	return <-errc
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// kubeletDir makes a shared bind of a temp dir onto itself, as kubelet makes its root directory.
func kubeletDir(t *testing.T) string {
	dir := t.TempDir()
	must(t, unix.Mount(dir, dir, "", unix.MS_BIND, ""))
	must(t, unix.Mount("", dir, "", unix.MS_SHARED, ""))
	testenv.Sweep(t, dir)
	return dir
}

func realReplacer(t *testing.T) (mountreplace.Replacer, *mountreplace.RealKernel) {
	t.Helper()
	k, err := mountreplace.NewKernel("")
	must(t, err)
	t.Cleanup(func() { _ = k.Release() })
	s := mountreplace.Probe(t.TempDir(), onThread)
	if !s.Beneath {
		t.Fatalf("this kernel (6.5 or later) must mount beneath: %v", s.Err)
	}
	return mountreplace.Replacer{Kernel: k, Support: s}, k
}

func table(t testing.TB, pid string) []mountinfo.Mount {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/mountinfo")
	must(t, err)
	tab, err := mountinfo.Parse(string(b))
	must(t, err)
	return tab
}

// stack is what a lookup of mp in pid's namespace passes through, bottom first: the top mount
// (statx through /proc/<pid>/root) and the mounts below it at the same mount point. Copies a
// shared parent propagated to hidden places with the same path are not on it.
func stack(t testing.TB, pid, mp string) []mountinfo.Mount {
	t.Helper()
	tab := table(t, pid)
	byID := map[int]mountinfo.Mount{}
	for _, m := range tab {
		byID[m.ID] = m
	}
	var out []mountinfo.Mount
	for m, ok := byID[topID(t, "/proc/"+pid+"/root"+mp)]; ok && m.MountPoint == mp; m, ok = byID[m.ParentID] {
		out = append([]mountinfo.Mount{m}, out...)
		if m.ParentID == m.ID {
			break
		}
	}
	return out
}

// under counts the mounts of pid's namespace at dir or below it.
func under(t testing.TB, pid, dir string) int {
	n := 0
	for _, m := range table(t, pid) {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			n++
		}
	}
	return n
}

func topID(t testing.TB, path string) int {
	t.Helper()
	var stx unix.Statx_t
	must(t, unix.Statx(unix.AT_FDCWD, path, unix.AT_STATX_DONT_SYNC|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &stx))
	return int(stx.Mnt_id)
}

func TestNodeProbe(t *testing.T) {
	testenv.RequireRoot(t)
	scratch := t.TempDir()
	before := len(table(t, "self"))
	s := mountreplace.Probe(scratch, onThread)
	if !s.Beneath || s.Err != nil {
		t.Fatalf("probe on %s: %+v", kernelRelease(t), s)
	}
	t.Logf("%s: %s", kernelRelease(t), s)
	if after := len(table(t, "self")); after != before {
		t.Errorf("the probe changed the agent's mount table: %d mounts, were %d", after, before)
	}
	if ents, _ := os.ReadDir(scratch); len(ents) != 0 {
		t.Errorf("probe left %d entries in its scratch directory", len(ents))
	}
}

func kernelRelease(t testing.TB) string {
	var u unix.Utsname
	must(t, unix.Uname(&u))
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}

// TestNodeFallbacks: the kernel's refusal at a shared parent whose propagation would overmount
// the top (a directory bound onto itself inside the shared kubelet directory), and a kernel
// without the flag (Support false), both stack and say why.
func TestNodeFallbacks(t *testing.T) {
	testenv.RequireRoot(t)
	dir := kubeletDir(t)
	live := filepath.Join(dir, "live")
	must(t, os.MkdirAll(live, 0o755))
	must(t, unix.Mount("tmpfs", live, "tmpfs", 0, "size=1m"))
	must(t, os.WriteFile(filepath.Join(live, "live.txt"), []byte("live\n"), 0o644))
	r, _ := realReplacer(t)

	self := filepath.Join(dir, "self")
	must(t, os.MkdirAll(self, 0o755))
	must(t, unix.Mount(self, self, "", unix.MS_BIND, ""))
	old := topID(t, self)
	res, err := r.Replace(mountreplace.Request{Target: self, Old: old, LivePath: live})
	must(t, err)
	t.Logf("self-bind in a shared parent: %+v", res)
	if res.Mode != mountreplace.Stacked || res.Reason != mountreplace.ReasonRefused || !errors.Is(res.Refusal, unix.EINVAL) {
		t.Errorf("result %+v; want stacked, refused with EINVAL", res)
	}
	// The self-bind is a peer of its parent, so the stacked mount also propagates to the parent
	// at that directory, beneath the self-bind (the overmount the kernel refuses to create for a
	// beneath move): the old mount stays, the new one is on top of it.
	if s := stack(t, "self", self); len(s) < 2 || s[len(s)-2].ID != old || s[len(s)-1].ID != res.New {
		t.Errorf("stack at %s = %+v; want %d with %d on top", self, s, old, res.New)
	}

	// A mount with a mount on it: detaching it would take the inner one along.
	outer, inner := filepath.Join(dir, "outer"), filepath.Join(dir, "outer", "inner")
	must(t, os.MkdirAll(outer, 0o755))
	must(t, unix.Mount("tmpfs", outer, "tmpfs", 0, "size=1m"))
	must(t, os.MkdirAll(inner, 0o755))
	must(t, unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"))
	innerID := topID(t, inner)
	old = topID(t, outer)
	res, err = r.Replace(mountreplace.Request{Target: outer, Old: old, LivePath: live})
	must(t, err)
	if res.Mode != mountreplace.Stacked || res.Reason != mountreplace.ReasonSubmounts {
		t.Errorf("result %+v; want stacked, submounts", res)
	}
	// (hidden now under the new mount, as any stacking hides it; the caller puts it back)
	if i := slices.IndexFunc(table(t, "self"), func(m mountinfo.Mount) bool { return m.ID == innerID && m.ParentID == old }); i < 0 {
		t.Errorf("inner mount %d is no longer on %d", innerID, old)
	}

	plain := filepath.Join(dir, "plain")
	must(t, os.MkdirAll(plain, 0o755))
	must(t, unix.Mount("tmpfs", plain, "tmpfs", 0, "size=1m"))
	old = topID(t, plain)
	r.Support = mountreplace.Support{Err: errors.New("forced")}
	res, err = r.Replace(mountreplace.Request{Target: plain, Old: old, LivePath: live})
	must(t, err)
	if res.Mode != mountreplace.Stacked || res.Reason != mountreplace.ReasonUnsupported {
		t.Errorf("result %+v; want stacked, unsupported", res)
	}
	if b, err := os.ReadFile(filepath.Join(plain, "live.txt")); err != nil || string(b) != "live\n" {
		t.Errorf("stacked mount does not show the live one: %q, %v", b, err)
	}
}

const (
	bucket    = "bkt"
	rootMark  = "marker.txt"
	subMark   = "submarker.txt"
	rootValue = "bucket marker\n"
	subValue  = "subdirectory marker\n"
	deaths    = 50
)

// ctr is a process in a mount namespace made as runc makes a container's volume mount.
type ctr struct {
	name, data, src string
	pid             int
	readOnly        bool
	// add is what the agent knows from the pod spec: HostToContainer means a slave mount.
	add mountreplace.Attrs
}

func startCtr(t *testing.T, dir, name, nsProp, script string) int {
	t.Helper()
	ready := filepath.Join(dir, name+".ready")
	cmd := exec.Command("unshare", "-m", "--propagation", nsProp, "sh", "-ec", script+"\ntouch "+ready+"\nexec sleep 3600")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testenv.WaitFor(t, 10*time.Second, "container "+name, func() error {
		if _, err := os.Stat(ready); err != nil {
			return fmt.Errorf("%w (%q)", err, out.String())
		}
		return nil
	})
	return cmd.Process.Pid
}

type timings map[string][]time.Duration

func (tm timings) report(t *testing.T) {
	keys := make([]string, 0, len(tm))
	for k := range tm {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		d := slices.Clone(tm[k])
		slices.Sort(d)
		pct := func(p int) time.Duration { return d[(len(d)-1)*p/100] }
		t.Logf("time per replace %-12s n=%d p50=%s p90=%s max=%s", k, len(d), pct(50), pct(90), d[len(d)-1])
	}
}

// TestNodeFiftyDeaths: a driver's s3fs serves a volume staged at a kubelet-like staging path and
// bound to a pod's target in the shared kubelet directory; three containers hold it
// (HostToContainer, None, a read-only subPath). Fifty times: kill -9 of the serving s3fs, a new
// s3fs at a fresh directory, Replace at staging, at the target and in each container's
// namespace, then the fresh directory is detached. Readers poll every path every millisecond.
func TestNodeFiftyDeaths(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "s3fs", "apt-get install s3fs")
	testenv.RequireCommand(t, "unshare", "apt-get install util-linux")
	srv := testenv.S3(t, bucket)
	for rel, v := range map[string]string{"pv1/" + rootMark: rootValue, "pv1/sub/dir/" + subMark: subValue} {
		p := filepath.Join(srv.Dir, bucket, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(v), 0o644))
	}
	dir := kubeletDir(t)
	freshRoot, ctrRoot := t.TempDir(), t.TempDir()
	testenv.Sweep(t, freshRoot)
	testenv.Sweep(t, ctrRoot)
	staging := filepath.Join(dir, "plugins/kubernetes.io/csi/s3.example/0123abcd/globalmount")
	target := filepath.Join(dir, "pods/0a1b2c3d/volumes/kubernetes.io~csi/pv1/mount")
	bare := func(p string) { must(t, mountreplacetest.BareDir(p)) }
	bare(staging)
	bare(target)
	start := func(mp string, n int, opts ...string) *testenv.S3fsMount {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		m, err := testenv.StartS3fs(ctx, srv.S3Config, testenv.S3fsSpec{Source: bucket + ":/pv1", MountPoint: mp,
			PasswdFile: filepath.Join(freshRoot, fmt.Sprintf("passwd-%d", n)), Options: append([]string{"allow_other"}, opts...), OwnGroup: true})
		must(t, err)
		return m
	}
	// The driver: NodeStage mounts s3fs at staging, NodePublish binds staging to the target.
	cur := start(staging, 0, "nonempty") // over the Decoy
	must(t, unix.Mount(staging, target, "", unix.MS_BIND, ""))

	ctrs := []*ctr{
		{name: "htc", src: target, add: mountreplace.Attrs{Slave: true}},
		{name: "none", src: target},
		{name: "sub", src: filepath.Join(target, "sub/dir"), readOnly: true},
	}
	for _, c := range ctrs {
		c.data = filepath.Join(ctrRoot, "ctr-"+c.name, "data")
		bare(c.data)
		script := []string{"mount --bind " + c.src + " " + c.data}
		nsProp := "private"
		switch c.name {
		case "htc":
			nsProp = "slave"
			script = append(script, "mount --make-rslave "+c.data)
		default:
			script = append(script, "mount --make-private "+c.data)
		}
		if c.readOnly {
			script = append(script, "mount -o remount,bind,ro "+c.data)
		}
		// A container's root never shows the kubelet directory.
		script = append(script, "umount -l "+dir)
		if c.name == "none" {
			script = append(script, "cd "+c.data) // the main process works in the volume: its mount is busy
		}
		c.pid = startCtr(t, ctrRoot, c.name, nsProp, strings.Join(script, "\n"))
	}
	pidOf := func(c *ctr) string { return strconv.Itoa(c.pid) }
	// What each replacement must keep.
	hostTop := func(p string) mountinfo.Mount { s := stack(t, "self", p); return s[len(s)-1] }
	ctrTop := func(c *ctr) mountinfo.Mount { s := stack(t, pidOf(c), c.data); return s[len(s)-1] }
	wantHost := map[string]mountinfo.Mount{staging: hostTop(staging), target: hostTop(target)}
	wantCtr := map[string]mountinfo.Mount{}
	for _, c := range ctrs {
		wantCtr[c.name] = ctrTop(c)
	}

	// Every reader lists its directory every millisecond.
	readers := []*mountreplacetest.Poller{
		{Name: "staging", Path: staging, Mark: rootMark, Value: rootValue},
		{Name: "target", Path: target, Mark: rootMark, Value: rootValue},
	}
	for _, c := range ctrs {
		r := &mountreplacetest.Poller{Name: c.name, Path: fmt.Sprintf("/proc/%d/root%s", c.pid, c.data), Mark: rootMark, Value: rootValue}
		if c.name == "sub" {
			r.Mark, r.Value = subMark, subValue
		}
		readers = append(readers, r)
	}
	for _, r := range readers {
		r.Look(0)
		if r.Live != 1 || len(r.Breaches) != 0 {
			t.Fatalf("%s does not read the volume before the first death: %+v", r.Name, r)
		}
	}
	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, r := range readers {
		wg.Go(func() { r.Run(ctx) })
	}
	stopped := false
	stopReaders := func() {
		if !stopped {
			stopped = true
			stop()
			wg.Wait()
		}
	}
	defer stopReaders()

	mountsBefore := map[string]int{"host": under(t, "self", dir)}
	for _, c := range ctrs {
		mountsBefore[c.name] = under(t, pidOf(c), ctrRoot)
	}
	rep, k := realReplacer(t)
	took := timings{}
	modes := map[mountreplace.Mode]int{}
	replace := func(kind string, req mountreplace.Request, ns int) {
		t.Helper()
		var res mountreplace.Result
		do := func() error {
			var err error
			res, err = rep.Replace(req)
			return err
		}
		var err error
		if ns == 0 {
			err = do()
		} else {
			err = inNamespace(ns, do)
		}
		if err != nil {
			t.Fatalf("replace %s: %v (result %+v)", kind, err, res)
		}
		modes[res.Mode]++
		if res.Mode != mountreplace.Beneath {
			t.Errorf("replace %s: %+v; want beneath", kind, res)
		}
		took[kind] = append(took[kind], res.Took)
	}
	for i := 1; i <= deaths; i++ {
		cur.Kill() // SIGKILL, as a plugin restart does
		testenv.WaitFor(t, 10*time.Second, "target dead", testenv.Until(func() bool {
			var st unix.Statfs_t
			return errors.Is(unix.Statfs(target, &st), syscall.ENOTCONN)
		}))
		fresh := filepath.Join(freshRoot, strconv.Itoa(i))
		cur = start(fresh, i)
		replace("staging", mountreplace.Request{Target: staging, Old: topID(t, staging), LivePath: fresh}, 0)
		replace("target", mountreplace.Request{Target: target, Old: topID(t, target), LivePath: fresh}, 0)
		if i == 1 {
			// The HostToContainer container's mount is a slave of the dead mount's peer group;
			// the new mount went to the dead one's parent, so nothing propagates to it: it stays
			// dead (never bare) until it is replaced inside the container.
			_, err := os.ReadDir(fmt.Sprintf("/proc/%d/root%s", ctrs[0].pid, ctrs[0].data))
			t.Logf("HostToContainer container after the host's replacement, before its own: %v", err)
			if !errors.Is(err, syscall.ENOTCONN) {
				t.Errorf("HostToContainer container after the host's replacement: %v, want ENOTCONN", err)
			}
		}
		for _, c := range ctrs {
			tree, err := k.Clone(c.src) // in the host's namespace, before setns
			must(t, err)
			replace(c.name, mountreplace.Request{Target: c.data, Old: topID(t, fmt.Sprintf("/proc/%d/root%s", c.pid, c.data)), Tree: tree, Add: c.add}, c.pid)
			must(t, k.Close(tree))
		}
		must(t, unix.Unmount(fresh, unix.MNT_DETACH))
		// Every reader reads the volume again before the next death.
		for _, r := range readers {
			n := r.LiveNow()
			testenv.WaitFor(t, 10*time.Second, r.Name+" reads the volume again", testenv.Until(func() bool { return r.LiveNow() > n }))
		}
		for _, p := range []string{staging, target} {
			if s := stack(t, "self", p); len(s) != 1 {
				t.Fatalf("death %d: %d mounts at %s", i, len(s), p)
			}
		}
		for _, c := range ctrs {
			s := stack(t, pidOf(c), c.data)
			if len(s) != 1 {
				t.Fatalf("death %d: %d mounts at %s in %s", i, len(s), c.data, c.name)
			}
			if p := mountreplace.PropagationOf(s[0]); p != (mountreplace.Propagation{Slave: c.add.Slave}) {
				t.Errorf("death %d: %s's mount is %s (%v)", i, c.name, p, s[0].Optional)
			}
		}
	}
	stopReaders()

	mountsAfter := map[string]int{"host": under(t, "self", dir)}
	for _, c := range ctrs {
		mountsAfter[c.name] = under(t, pidOf(c), ctrRoot)
	}
	t.Logf("mounts under the kubelet-like directory (host) and the containers' directory, before → after %d deaths: %v → %v", deaths, mountsBefore, mountsAfter)
	for name, n := range mountsBefore {
		if mountsAfter[name] != n {
			t.Errorf("%s: %d mounts after %d deaths, were %d (dead layers or propagated copies left)", name, mountsAfter[name], deaths, n)
		}
	}
	for _, p := range []string{staging, target} {
		s := stack(t, "self", p)
		got, want := s[len(s)-1], wantHost[p]
		t.Logf("host %s after %d deaths: depth %d, top %d %v %v", strings.TrimPrefix(p, dir), deaths, len(s), got.ID, got.Options, got.Optional)
		if len(s) != 1 || got.Dev == want.Dev {
			t.Errorf("host %s: %+v; want one mount of a new connection", p, s)
		}
		if mountreplace.AttrsOf(got) != mountreplace.AttrsOf(want) || mountreplace.PropagationOf(got) != mountreplace.PropagationOf(want) {
			t.Errorf("host %s flags %v %v, were %v %v", p, got.Options, got.Optional, want.Options, want.Optional)
		}
	}
	for _, c := range ctrs {
		s := stack(t, pidOf(c), c.data)
		got, want := s[len(s)-1], wantCtr[c.name]
		t.Logf("container %s %s after %d deaths: depth %d, top %d root %s %v %v", c.name, c.data, deaths, len(s), got.ID, got.Root, got.Options, got.Optional)
		if len(s) != 1 || got.Root != want.Root {
			t.Errorf("container %s: %+v; want one mount of %s", c.name, s, want.Root)
		}
		if mountreplace.AttrsOf(got) != mountreplace.AttrsOf(want) || mountreplace.PropagationOf(got) != mountreplace.PropagationOf(want) {
			t.Errorf("container %s flags %v %v, were %v %v", c.name, got.Options, got.Optional, want.Options, want.Optional)
		}
	}
	sub := fmt.Sprintf("/proc/%d/root%s/written", ctrs[2].pid, ctrs[2].data)
	if err := os.WriteFile(sub, []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write into the read-only subPath after %d deaths: %v, want EROFS", deaths, err)
	}
	none := fmt.Sprintf("/proc/%d/root%s/written", ctrs[1].pid, ctrs[1].data)
	must(t, os.WriteFile(none, []byte("x\n"), 0o644))
	for _, r := range readers {
		t.Logf("reader %-8s polls: %d live (%d marker reads), %d dead (ENOTCONN), %d errors, %d breaches",
			r.Name, r.Live, r.Reads, r.Dead, r.Errs, len(r.Breaches))
		if len(r.Breaches) != 0 {
			t.Errorf("reader %s saw something other than the volume or its dead connection: %v", r.Name, r.Breaches[:min(5, len(r.Breaches))])
		}
		if r.Live < deaths {
			t.Errorf("reader %s read the volume only %d times", r.Name, r.Live)
		}
	}
	t.Logf("modes: %v", modes)
	took.report(t)
}

// TestNodeLockedMountStacks: in a container with a user namespace of its own, the mounts it
// inherited are locked (the kernel never lets a less privileged namespace reveal what is under
// them): a beneath move is refused there, and the replacement stacks and says so.
func TestNodeLockedMountStacks(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "unshare", "apt-get install util-linux")
	dir := kubeletDir(t)
	live, locked := filepath.Join(dir, "live"), filepath.Join(dir, "locked")
	for _, p := range []string{live, locked} {
		must(t, os.MkdirAll(p, 0o755))
		must(t, unix.Mount("tmpfs", p, "tmpfs", 0, "size=1m"))
	}
	must(t, os.WriteFile(filepath.Join(live, "live.txt"), []byte("live\n"), 0o644))
	uctx := t.TempDir()
	ready := filepath.Join(uctx, "ready")
	cmd := exec.Command("unshare", "-U", "--map-root-user", "-m", "--propagation", "private", "sh", "-ec", "touch "+ready+"\nexec sleep 3600")
	must(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testenv.WaitFor(t, 10*time.Second, "user-namespaced container", testenv.Until(func() bool { _, err := os.Stat(ready); return err == nil }))
	upid := cmd.Process.Pid

	r, k := realReplacer(t)
	tree, err := k.Clone(live)
	must(t, err)
	defer func() { _ = k.Close(tree) }() // test clean-up
	old := topID(t, fmt.Sprintf("/proc/%d/root%s", upid, locked))
	var res mountreplace.Result
	must(t, inNamespace(upid, func() error {
		var err error
		res, err = r.Replace(mountreplace.Request{Target: locked, Old: old, Tree: tree})
		return err
	}))
	t.Logf("locked mount: %+v", res)
	if res.Mode != mountreplace.Stacked || res.Reason != mountreplace.ReasonRefused {
		t.Errorf("result %+v; want stacked, refused", res)
	}
	if s := stack(t, strconv.Itoa(upid), locked); len(s) != 2 || s[0].ID != old || s[1].ID != res.New {
		t.Errorf("stack in the container %+v; want %d with %d on top", s, old, res.New)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/root%s/live.txt", upid, locked)); err != nil || string(b) != "live\n" {
		t.Errorf("container does not read the new mount: %q, %v", b, err)
	}
}
