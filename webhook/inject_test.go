package webhook

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// A user's init containers named like ours are never touched, even when nothing is injected
// (the pod maps no local block claim and mounts no S3 volume).
func TestInjectLeavesUserContainersNamedLikeOurs(t *testing.T) {
	pod, objs := loadCase(t, "testdata/golden/local-filesystem.yaml")
	pod.Spec.InitContainers = []corev1.Container{
		{Name: contract.GuardContainerName, Image: "example.test/mine:1", Args: []string{"guard", "--device", "/dev/x=y"}},
		{Name: contract.InstallContainerName, Image: "example.test/mine:1"},
	}
	got := pod.DeepCopy()
	in := newDefaulter(objs...).Default(context.Background(), pod.Namespace, got)
	if len(in.Patch) != 0 || in.Injected() {
		t.Errorf("operations %+v on a pod with nothing to inject", in.Patch)
	}
	if d := cmp.Diff(pod, got); d != "" {
		t.Errorf("pod changed (-in +out):\n%s", d)
	}
}

// A later pass refreshes what pvrescue owns on its own containers, in place, with replace
// operations addressed to them only; the patch yields the same pod as Inject.
func TestInjectRefreshesOwnContainersInPlace(t *testing.T) {
	pod, objs := loadCase(t, "testdata/golden/colliding-names.yaml")
	d := newDefaulter(objs...)
	first := pod.DeepCopy()
	d.Default(context.Background(), pod.Namespace, first)

	d.Config.Helper.Image = "example.test/pvrescue-webhook:v2"
	second := first.DeepCopy()
	in := d.Default(context.Background(), pod.Namespace, second)
	var paths []string
	for _, op := range in.Patch {
		paths = append(paths, op.Operation+" "+op.Path)
	}
	want := []string{"replace /spec/initContainers/0", "replace /spec/initContainers/1"}
	if d := cmp.Diff(want, paths); d != "" {
		t.Errorf("operations (-want +got):\n%s", d)
	}
	for i, c := range second.Spec.InitContainers {
		mine := i >= 2
		if mine != (c.Image != d.Config.Helper.Image) {
			t.Errorf("init container %d %q has image %s", i, c.Name, c.Image)
		}
	}
	if diff := cmp.Diff(second, applyPatch(t, first, in.Patch)); diff != "" {
		t.Errorf("patched pod differs (-inject +patch):\n%s", diff)
	}
}

// When the pod no longer needs a guard (another webhook removed the devices between passes),
// pvrescue's own guard goes and the user's init containers stay, in order.
func TestInjectRemovesOwnGuardNoLongerNeeded(t *testing.T) {
	pod, objs := loadCase(t, "testdata/golden/colliding-names.yaml")
	d := newDefaulter(objs...)
	first := pod.DeepCopy()
	d.Default(context.Background(), pod.Namespace, first)
	first.Spec.Containers[0].VolumeDevices = nil

	second := first.DeepCopy()
	in := d.Default(context.Background(), pod.Namespace, second)
	var names []string
	for _, c := range second.Spec.InitContainers {
		names = append(names, c.Name)
	}
	if d := cmp.Diff([]string{"pvrescue-install-2", contract.GuardContainerName, contract.InstallContainerName}, names); d != "" {
		t.Errorf("init containers (-want +got):\n%s", d)
	}
	if d := cmp.Diff(pod.Spec.InitContainers, second.Spec.InitContainers[1:]); d != "" {
		t.Errorf("user init containers changed:\n%s", d)
	}
	if diff := cmp.Diff(second, applyPatch(t, first, in.Patch)); diff != "" {
		t.Errorf("patched pod differs (-inject +patch):\n%s", diff)
	}
}

func TestConsistent(t *testing.T) {
	tests := []struct {
		name string
		devs []device
		ok   bool
	}{
		{"distinct", []device{{"a", "/dev/a", "ca"}, {"b", "/dev/b", "cb"}}, true},
		{"same pair twice", []device{{"a", "/dev/a", "ca"}, {"a", "/dev/a", "ca"}}, true},
		{"one volume two paths", []device{{"a", "/dev/a", "ca"}, {"a", "/dev/b", "ca"}}, false},
		{"two volumes one path", []device{{"a", "/dev/a", "ca"}, {"b", "/dev/a", "cb"}}, false},
		{"one file name in two dirs", []device{{"a", "/dev/x/d", "ca"}, {"b", "/dev/y/d", "cb"}}, false},
	}
	for _, tt := range tests {
		if got := consistent(tt.devs); (got == "") != tt.ok {
			t.Errorf("%s: consistent = %q, want ok=%v", tt.name, got, tt.ok)
		}
	}
}
