//go:build node

package containermount_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

// TestNodeUserNamespacedContainer: a pod in a user namespace of its own (the runtime makes one
// from the host's for hostUsers: false, judged from the kernel: the container is the pod's only
// one, so its user namespace is the pod's), whose mount namespace holds a locked copy of the pod
// target (inherited) and a bind it made itself. Stacking needs no unmount, so locked mounts are
// fixed too; unmounting the dead mount first (the other way to replace it) is refused for the
// locked one. The pod spec says nothing of hostUsers (the default, true): the kernel decides.
func TestNodeUserNamespacedContainer(t *testing.T) {
	n := newNode(t)
	udata := filepath.Join(n.dir, "ctr-userns", "data")
	must(t, os.MkdirAll(udata, 0o755))
	uc := n.startContainerArgs("userns", []string{"-U", "--map-root-user", "-m", "--propagation", "private"},
		"mount --bind "+n.target+" "+udata)
	if got := read(t, uc.path(udata)+"/root.txt"); got != "volume root\n" {
		t.Fatalf("userns container before the failure: %q", got)
	}
	n.kill()
	n.restore()
	// Even from the host's root, the inherited (locked) dead mount cannot be unmounted.
	if out, err := exec.Command("nsenter", "-t", strconv.Itoa(uc.pid), "-m", "umount", "-l", n.target).CombinedOutput(); err == nil {
		t.Errorf("umount -l of a locked mount in the userns container succeeded (%s); the package doc says it fails", out)
	}

	n.mounts("userns", vm(udata, "", false), vm(n.target, "", false))
	r, _ := n.remounter(inPod(map[int]string{uc.pid: "userns"}))
	res, err := r.RemountInContainers(logr.NewContext(context.Background(), testr.New(t)), n.request("userns"))
	must(t, err)
	for _, want := range []string{"userns:" + udata, "userns:" + n.target} {
		if !slices.Contains(res.Fixed, want) {
			t.Errorf("%s not fixed: %+v", want, res)
		}
	}
	if len(res.Failed) != 0 {
		t.Errorf("failures: %v", res.Failed)
	}
	for _, p := range []string{uc.path(udata), uc.path(n.target)} {
		if got := read(t, p+"/root.txt"); got != "volume root\n" {
			t.Errorf("%s/root.txt = %q", p, got)
		}
	}
}

// TestNodeReadOnlyLiveMount: when the host restored the target read-only, a container whose dead
// mount was writable gets a read-only mount (flags are only ever added), and the pass says so.
func TestNodeReadOnlyLiveMount(t *testing.T) {
	n := newNode(t)
	app, data, _ := n.appContainer("app")
	n.kill()
	n.restore()
	must(t, unix.Mount("", n.target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""))
	r, _ := n.remounter(inPod(map[int]string{app.pid: "app"}))
	res, err := r.RemountInContainers(logr.NewContext(context.Background(), testr.New(t)), n.request("app"))
	must(t, err)
	if !slices.Contains(res.Fixed, "app:"+data) || len(res.Failed) != 0 {
		t.Fatalf("result = %+v; want app:%s fixed", res, data)
	}
	if got := read(t, app.path(data)+"/root.txt"); got != "volume root\n" {
		t.Errorf("/data/root.txt = %q", got)
	}
	if err := os.WriteFile(app.path(data)+"/x", []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("write through a clone of a read-only live mount: %v, want EROFS", err)
	}
}

// TestNodeTenantNestedNamespaceSkipped: inside app's container a process makes its own user and
// mount namespace (unshare -Urm, as a tenant may), which holds a copy of the dead mount. The
// agent fixes app's own namespace (the runtime's, entered through the container's init) and
// leaves the tenant's namespace exactly as it was, with a ContainerMountSkipped Event: a clone
// put there from the agent's namespace would not be locked, and the tenant, root in its user
// namespace, could remount it writable.
func TestNodeTenantNestedNamespaceSkipped(t *testing.T) {
	n := newNode(t)
	app, data, _ := n.appContainer("app")
	ready := filepath.Join(n.dir, "nested.ready")
	nested := exec.Command("nsenter", "-t", strconv.Itoa(app.pid), "-m", "unshare", "-U", "--map-root-user", "-m", "--propagation", "private",
		"sh", "-ec", "touch "+ready+"\nexec sleep 3600")
	must(t, nested.Start())
	t.Cleanup(func() { _ = nested.Process.Kill(); _ = nested.Wait() })
	testenv.WaitFor(t, 10*time.Second, "tenant's nested namespace", testenv.Until(func() bool { _, err := os.Stat(ready); return err == nil }))
	tenant := &container{pid: nested.Process.Pid, cmd: nested}
	if nsOf(t, tenant.pid) == nsOf(t, app.pid) {
		t.Fatal("the nested process shares app's mount namespace")
	}
	n.kill()
	n.restore()
	before := tenant.table(t).Stack(data)
	if len(before) == 0 || before[len(before)-1].Dev != n.deadDev {
		t.Fatalf("tenant's namespace before the pass: stack at %s = %+v, want the dead mount on top", data, before)
	}

	r, rec := n.remounter(inPod(map[int]string{app.pid: "app", tenant.pid: "app"}))
	res, err := r.RemountInContainers(logr.NewContext(context.Background(), testr.New(t)), n.request("app"))
	must(t, err)
	ev := drain(rec)
	t.Logf("result %+v, events %q", res, ev)
	if !slices.Contains(res.Fixed, "app:"+data) {
		t.Errorf("app:%s not fixed: %+v", data, res)
	}
	var skippedKey string
	for k, err := range res.Failed {
		if strings.Contains(k, "of pid "+strconv.Itoa(tenant.pid)+")") && errors.Is(err, containermount.ErrNotRuntimeNamespace) {
			skippedKey = k
		} else {
			t.Errorf("unexpected failure %s: %v", k, err)
		}
	}
	if skippedKey == "" {
		t.Errorf("the tenant's namespace is not reported as skipped: %v", res.Failed)
	}
	after := tenant.table(t).Stack(data)
	if !slices.EqualFunc(before, after, func(a, b containermount.Mount) bool { return a.ID == b.ID }) {
		t.Errorf("the tenant's namespace changed: stack %+v -> %+v", before, after)
	}
	if _, err := os.Stat(tenant.path(data) + "/root.txt"); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("tenant's namespace: stat = %v, want ENOTCONN (left to the probe)", err)
	}
	if got := read(t, app.path(data)+"/root.txt"); got != "volume root\n" {
		t.Errorf("app's /data/root.txt = %q", got)
	}
	var skipped int
	for _, e := range ev {
		if strings.HasPrefix(e, "Warning "+containermount.ReasonSkipped) && strings.Contains(e, "of pid "+strconv.Itoa(tenant.pid)) {
			skipped++
		}
	}
	if skipped != 1 {
		t.Errorf("events %q, want one %s naming pid %d", ev, containermount.ReasonSkipped, tenant.pid)
	}
}
