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
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"golang.org/x/sys/unix"
)

// TestNodeUserNamespacedContainer: a container in a user namespace of its own, whose mount
// namespace holds a locked copy of the pod target (inherited) and a bind it made itself, next to
// an ordinary container. Stacking needs no unmount, so locked mounts are fixed too; unmounting
// the dead mount first (the other way to replace it) is refused for the locked one.
func TestNodeUserNamespacedContainer(t *testing.T) {
	n := newNode(t)
	app, data, _ := n.appContainer("app")
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
	r, _ := n.remounter(inPod(map[int]string{app.pid: "app", uc.pid: "userns"}))
	res, err := r.RemountInContainers(logr.NewContext(context.Background(), testr.New(t)), n.request("app", "userns"))
	must(t, err)
	for _, want := range []string{"userns:" + udata, "userns:" + n.target, "app:" + data} {
		if !slices.Contains(res.Fixed, want) {
			t.Errorf("%s not fixed: %+v", want, res)
		}
	}
	if len(res.Failed) != 0 {
		t.Errorf("failures: %v", res.Failed)
	}
	for _, p := range []string{uc.path(udata), uc.path(n.target), app.path(data)} {
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
