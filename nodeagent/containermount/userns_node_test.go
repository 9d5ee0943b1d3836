//go:build node

package containermount_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
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
