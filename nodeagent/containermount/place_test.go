package containermount_test

import (
	"errors"
	"testing"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
	"github.com/pvrescue/pvrescue/internal/mountreplace/mountreplacetest"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
)

// A container namespace as the fake kernel models it: the host's live mount (shared, as under
// kubelet's directory) and the container's dead mount at /ctr/data.
func placeNode(t *testing.T, dead mountreplacetest.Mount) (*mountreplacetest.FakeKernel, int, int) {
	t.Helper()
	k := mountreplacetest.NewFakeKernel()
	live := k.Mount(mountreplacetest.Mount{MountPoint: livePath, Dev: liveDev, Attrs: mountreplace.Attrs{NoSuid: true, NoDev: true}})
	k.MakeShared(live)
	k.Mount(mountreplacetest.Mount{MountPoint: "/ctr", Dev: "0:30", FSType: "overlay"})
	dead.MountPoint, dead.Dev = "/ctr/data", deadDev
	old := k.Mount(dead)
	k.Watch("/ctr/data")
	tree, err := k.Clone(livePath)
	must(t, err)
	return k, old, tree
}

func TestPlace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		dead    mountreplacetest.Mount
		attach  containermount.Attach
		noBen   bool
		refuse  bool
		mode    mountreplace.Mode
		reason  string
		depth   int
		ro      bool
		slave   bool
		private bool
	}{
		{name: "beneath", mode: mountreplace.Beneath, depth: 1},
		{name: "read-only subPath stays read-only", dead: mountreplacetest.Mount{Attrs: mountreplace.Attrs{ReadOnly: true}},
			mode: mountreplace.Beneath, depth: 1, ro: true},
		{name: "read-only from the spec", attach: containermount.Attach{ReadOnly: true}, mode: mountreplace.Beneath, depth: 1, ro: true},
		// The host's dead mount was replaced first: the container's HostToContainer mount lost its
		// master and shows private; the spec says it is a slave.
		{name: "HostToContainer from the spec", attach: containermount.Attach{Slave: true}, mode: mountreplace.Beneath, depth: 1, slave: true},
		{name: "HostToContainer, live mount in no peer group", attach: containermount.Attach{Slave: true, NoPeerGroup: true},
			dead: mountreplacetest.Mount{Master: 77, Attrs: mountreplace.Attrs{Slave: true}}, mode: mountreplace.Beneath, depth: 1, private: true},
		{name: "kernel older than 6.5", noBen: true, mode: mountreplace.Stacked, reason: mountreplace.ReasonUnsupported, depth: 2},
		{name: "kernel refuses here", refuse: true, dead: mountreplacetest.Mount{Attrs: mountreplace.Attrs{ReadOnly: true}},
			mode: mountreplace.Stacked, reason: mountreplace.ReasonRefused, depth: 2, ro: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, old, tree := placeNode(t, tc.dead)
			k.Refuse["/ctr/data"] = tc.refuse
			a := tc.attach
			a.Target, a.ExpectMountID = "/ctr/data", old
			a.NoSuid, a.NoDev = true, true // the remounter adds the live mount's flags
			out := make([]containermount.Outcome, 1)
			containermount.Place(k, mountreplace.Support{Beneath: !tc.noBen}, []int{tree}, []containermount.Attach{a}, out)
			if out[0].Err != nil {
				t.Fatal(out[0].Err)
			}
			if r := out[0].Replace; r.Mode != tc.mode || r.Reason != tc.reason {
				t.Errorf("outcome %+v; want %s %q", r, tc.mode, tc.reason)
			}
			s := k.Stack("/ctr/data")
			top := s[len(s)-1]
			if len(s) != tc.depth || top.Dev != liveDev || top.ReadOnly != tc.ro {
				t.Errorf("stack %+v; want depth %d, live on top, read-only %v", s, tc.depth, tc.ro)
			}
			if !top.NoSuid || !top.NoDev {
				t.Errorf("top %+v lost the added nosuid/nodev", top)
			}
			if (top.Master != 0) != tc.slave || (tc.private && (top.Master != 0 || top.Group != 0)) {
				t.Errorf("top %+v: slave %v, private %v wanted", top, tc.slave, tc.private)
			}
			if tc.depth == 2 && s[0].ID != old {
				t.Errorf("stacked, but the dead mount %d is not beneath: %+v", old, s)
			}
			if len(k.Breaches) != 0 {
				t.Errorf("bare directory seen: %v", k.Breaches)
			}
		})
	}
}

func TestPlaceLeavesAChangedTargetAlone(t *testing.T) {
	k, old, tree := placeNode(t, mountreplacetest.Mount{})
	other := k.Mount(mountreplacetest.Mount{MountPoint: "/ctr/data", Dev: "0:99", FSType: "tmpfs"})
	out := make([]containermount.Outcome, 2)
	out[1].Err = containermount.ErrSource // its clone failed: skipped
	containermount.Place(k, mountreplace.Support{Beneath: true}, []int{tree, -1},
		[]containermount.Attach{{Target: "/ctr/data", ExpectMountID: old}, {Target: "/ctr/x", ExpectMountID: old}}, out)
	if !errors.Is(out[0].Err, containermount.ErrTargetChanged) || !errors.Is(out[1].Err, containermount.ErrSource) {
		t.Errorf("outcomes %+v; want target changed, and the failed clone left as it was", out)
	}
	if s := k.Stack("/ctr/data"); len(s) != 2 || s[1].ID != other {
		t.Errorf("stack %+v; want untouched", s)
	}
}

func TestPlaceProtect(t *testing.T) {
	k, old, _ := placeNode(t, mountreplacetest.Mount{})
	out := make([]containermount.Outcome, 1)
	containermount.Place(k, mountreplace.Support{Beneath: true}, []int{0},
		[]containermount.Attach{{Target: "/ctr/data", ExpectMountID: old, Protect: true}}, out)
	if out[0].Err != nil || out[0].Replace.Mode != "" {
		t.Fatalf("outcome %+v", out[0])
	}
	if m, _ := k.Get(old); !m.ReadOnly {
		t.Errorf("mount %+v not made read-only", m)
	}
}
