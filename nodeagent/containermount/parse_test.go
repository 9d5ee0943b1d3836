package containermount

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	uidDashed = "6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"
	uidUnder  = "6f1a2b3c_4d5e_6f70_8192_a3b4c5d6e7f8"
	cid       = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestParseCgroup(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string
		want    CgroupInfo
		ok      bool
	}{
		{"v1 cgroupfs burstable", "12:memory:/kubepods/burstable/pod" + uidDashed + "/" + cid + "\n11:cpu,cpuacct:/kubepods/burstable/pod" + uidDashed + "/" + cid,
			CgroupInfo{PodUID: uidDashed, ContainerID: cid}, true},
		{"v1 cgroupfs guaranteed", "4:pids:/kubepods/pod" + uidDashed + "/" + cid, CgroupInfo{uidDashed, cid}, true},
		{"v1 cgroupfs pod cgroup itself", "4:pids:/kubepods/besteffort/pod" + uidDashed, CgroupInfo{uidDashed, ""}, true},
		{"v2 systemd containerd", "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uidUnder + ".slice/cri-containerd-" + cid + ".scope",
			CgroupInfo{uidDashed, cid}, true},
		{"v2 systemd guaranteed crio", "0::/kubepods.slice/kubepods-pod" + uidUnder + ".slice/crio-" + cid + ".scope", CgroupInfo{uidDashed, cid}, true},
		{"v1 systemd docker", "3:devices:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + uidUnder + ".slice/docker-" + cid + ".scope",
			CgroupInfo{uidDashed, cid}, true},
		{"v2 cgroupfs", "0::/kubepods/burstable/pod" + uidDashed + "/" + cid, CgroupInfo{uidDashed, cid}, true},
		{"cgroup namespace shortened", "0::/../pod" + uidDashed + "/" + cid, CgroupInfo{uidDashed, cid}, true},
		{"static pod hex uid", "5:cpu:/kubepods/burstable/pod0123456789abcdef0123456789abcdef/" + cid,
			CgroupInfo{"0123456789abcdef0123456789abcdef", cid}, true},
		{"uppercase normalised", "0::/kubepods/pod" + "6F1A2B3C-4D5E-6F70-8192-A3B4C5D6E7F8" + "/x", CgroupInfo{uidDashed, "x"}, true},
		{"host process", "0::/system.slice/containerd.service\n1:name=systemd:/init.scope", CgroupInfo{}, false},
		{"podman is not a pod", "0::/user.slice/podman-1234.scope", CgroupInfo{}, false},
		{"pod prefix with non uid", "0::/kubepods/podcast/abc", CgroupInfo{}, false},
		{"malformed uid groups", "0::/kubepods/pod6f1a2b3c4-d5e-6f70-8192-a3b4c5d6e7f8/x", CgroupInfo{}, false},
		{"non kubepods slice", "0::/machine.slice/machine-pod" + uidUnder + ".slice", CgroupInfo{}, false},
		{"empty", "", CgroupInfo{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ParseCgroup(tc.content)
			if ok != tc.ok || got != tc.want {
				t.Errorf("ParseCgroup = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestTrimContainerID(t *testing.T) {
	for in, want := range map[string]string{"containerd://" + cid: cid, "cri-o://abc": "abc", "abc": "abc", "": ""} {
		if got := TrimContainerID(in); got != want {
			t.Errorf("TrimContainerID(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseMountInfo(t *testing.T) {
	content := `23 1 0:21 / / rw,relatime shared:1 - overlay overlay rw
500 23 0:55 / /data rw,nosuid,nodev,relatime master:7 - fuse.s3fs s3fs rw,user_id=0
501 23 0:55 /sub/dir /my\040path ro,relatime - fuse.s3fs s3fs rw
`
	got, err := ParseMountInfo(content)
	if err != nil {
		t.Fatal(err)
	}
	want := MountTable{
		{ID: 23, ParentID: 1, Dev: "0:21", Root: "/", MountPoint: "/", Options: []string{"rw", "relatime"}, Optional: []string{"shared:1"}, FSType: "overlay", Source: "overlay"},
		{ID: 500, ParentID: 23, Dev: "0:55", Root: "/", MountPoint: "/data", Options: []string{"rw", "nosuid", "nodev", "relatime"}, Optional: []string{"master:7"}, FSType: "fuse.s3fs", Source: "s3fs"},
		{ID: 501, ParentID: 23, Dev: "0:55", Root: "/sub/dir", MountPoint: "/my path", Options: []string{"ro", "relatime"}, FSType: "fuse.s3fs", Source: "s3fs"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("ParseMountInfo (-want +got):\n%s", d)
	}
	if !got[2].ReadOnly() || got[1].ReadOnly() || !got[1].HasOption("nosuid") {
		t.Errorf("option helpers wrong: %+v", got)
	}
	for _, bad := range []string{"1 2 3", "x 1 0:1 / / rw - ext4 a rw", "1 1 01 / / rw - ext4 a rw", "1 1 0:1 / / rw ext4 a rw", "1 1 0:1 / / rw -"} {
		if _, err := ParseMountInfo(bad); !errors.Is(err, ErrMountInfo) {
			t.Errorf("ParseMountInfo(%q) err = %v, want ErrMountInfo", bad, err)
		}
	}
}

func TestMountTableReach(t *testing.T) {
	tab, err := ParseMountInfo(`1 0 0:21 / / rw - overlay overlay rw
2 1 0:22 / /a rw - tmpfs t rw
3 2 0:23 / /a/b rw - tmpfs t rw
4 2 0:24 / /a rw - tmpfs t rw
5 1 0:25 / /c rw - tmpfs t rw
6 5 0:26 / /c rw - tmpfs t rw
`)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]int{
		"/":      1,
		"/a":     4, // 4 is stacked on 2
		"/a/b":   4, // 3 sits on 2, hidden under 4: the lookup reaches a plain directory of 4
		"/a/b/c": 4,
		"/c":     6,
		"/c/d":   6,
		"/x/y":   1,
	} {
		if got, _ := tab.Reach(p); got.ID != want {
			t.Errorf("Reach(%q) = %d, want %d", p, got.ID, want)
		}
	}
}

func TestMountTableTop(t *testing.T) {
	// Line order differs from stacking order: 40 sits on 30, which sits on 20.
	tab, err := ParseMountInfo(`40 30 0:60 / /t rw - fuse.s3fs a rw
20 1 0:55 / /t rw - fuse.s3fs a rw
30 20 0:56 / /t rw - fuse.s3fs a rw
`)
	if err != nil {
		t.Fatal(err)
	}
	if top, _ := tab.Top("/t"); top.ID != 40 {
		t.Errorf("Top = %d, want 40", top.ID)
	}
	if _, ok := tab.Top("/none"); ok {
		t.Error("Top of an unmounted path reported a mount")
	}
}

func TestOffset(t *testing.T) {
	for _, tc := range []struct {
		deadRoot, root, want string
		err                  error
	}{
		{"/", "/", "", nil},
		{"/", "/sub", "sub", nil},
		{"/", "/sub/dir/", "sub/dir", nil},
		{"/pfx", "/pfx", "", nil},
		{"/pfx", "/pfx/sub", "sub", nil},
		{"/pfx/", "/pfx/sub", "sub", nil},
		{"/pfx", "/pfxother", "", ErrOutsideVolume},
		{"/pfx", "/", "", ErrOutsideVolume},
		{"/pfx", "/other/sub", "", ErrOutsideVolume},
		{"/", "sub", "", ErrOutsideVolume},
		{"/", "/sub//deleted", "", ErrDeletedRoot},
	} {
		got, err := Offset(tc.deadRoot, tc.root)
		if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
			t.Errorf("Offset(%q, %q) = %q, %v; want %q, %v", tc.deadRoot, tc.root, got, err, tc.want, tc.err)
		}
	}
}

func TestGroupByNamespace(t *testing.T) {
	pod := CgroupInfo{PodUID: uidDashed}
	in := func(id string) CgroupInfo { return CgroupInfo{PodUID: uidDashed, ContainerID: id} }
	procs := []Proc{
		{Pid: 90, MountNS: 3, Cgroup: in("c2")},
		{Pid: 12, MountNS: 2, Cgroup: in("c1")},
		{Pid: 13, MountNS: 2, Cgroup: in("c1")},      // a second process of c1: same namespace, once
		{Pid: 40, MountNS: 3, Cgroup: in("c3")},      // c3 shares c2's namespace
		{Pid: 5, MountNS: 9, Cgroup: pod},            // the sandbox
		{Pid: 7, MountNS: 100, Cgroup: in("hostns")}, // shares the host's namespace: skipped
		{Pid: 8, MountNS: 200, Cgroup: in("agent")},  // shares the agent's: skipped
		{Pid: 9, MountNS: 4, Cgroup: CgroupInfo{PodUID: "other"}},
		{Pid: 10, MountNS: 0, Cgroup: in("gone")}, // namespace unreadable
	}
	got := GroupByNamespace(procs, uidDashed, 100, 200)
	want := []Namespace{
		{Inode: 9, Pids: []int{5}},
		{Inode: 2, Pids: []int{12, 13}, ContainerIDs: []string{"c1"}},
		{Inode: 3, Pids: []int{40, 90}, ContainerIDs: []string{"c2", "c3"}},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("GroupByNamespace (-want +got):\n%s", d)
	}
	// The pod UID may come in any accepted form.
	if got := GroupByNamespace(procs, uidUnder, 100, 200); len(got) != 3 {
		t.Errorf("underscored pod UID matched %d namespaces, want 3", len(got))
	}
}

func TestPlanNamespace(t *testing.T) {
	tab, err := ParseMountInfo(`1 0 0:21 / / rw - overlay overlay rw
100 1 0:55 / /data rw,nosuid,nodev - fuse.s3fs s3fs rw
101 1 0:55 /sub/dir /sub ro - fuse.s3fs s3fs rw
102 1 0:55 / /covered rw master:4 - fuse.s3fs s3fs rw
103 102 0:60 / /covered rw master:4 - fuse.s3fs s3fs rw
104 1 0:55 /other /outside rw - fuse.s3fs s3fs rw
105 1 0:56 / /unrelated rw - fuse.s3fs s3fs rw
106 1 0:55 / /hidden rw - fuse.s3fs s3fs rw
107 106 0:21 / /hidden rw - tmpfs tmpfs rw
108 100 0:55 /x /data/inner rw master:2 - fuse.s3fs s3fs rw
110 1 0:55 / /v rw - fuse.s3fs s3fs rw
111 110 0:55 /y /v/in ro,noexec - fuse.s3fs s3fs rw
112 110 0:60 / /v rw - fuse.s3fs s3fs rw
`)
	if err != nil {
		t.Fatal(err)
	}
	// The pod's dead target showed /pfx of the bucket; /pfx/.. is not the volume.
	got := PlanNamespace(tab, "0:55", "/", "0:60")
	want := Plan{
		Targets: []Target{
			{MountPoint: "/data", Offset: "", DeadMountID: 100, NoSuid: true, NoDev: true},
			{MountPoint: "/sub", Offset: "sub/dir", DeadMountID: 101, ReadOnly: true},
			{MountPoint: "/outside", Offset: "other", DeadMountID: 104},
			{MountPoint: "/data/inner", Offset: "x", DeadMountID: 108, Slave: true},
			// hidden under the live mount on /v: nested again inside it, expecting to reach 112
			{MountPoint: "/v/in", Offset: "y", DeadMountID: 112, ReadOnly: true, NoExec: true, Nest: true},
		},
		Live:    []string{"/covered", "/hidden", "/v"}, // live on top, something else on top, live on top
		Skipped: map[string]error{},
	}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) || errors.Is(b, a) })); d != "" {
		t.Errorf("PlanNamespace (-want +got):\n%s", d)
	}

	got = PlanNamespace(tab, "0:55", "/sub", "0:60")
	if len(got.Skipped) != 4 || !errors.Is(got.Skipped["/data"], ErrOutsideVolume) || !errors.Is(got.Skipped["/outside"], ErrOutsideVolume) {
		t.Errorf("with dead root /sub, mounts outside it must be skipped, got %+v", got)
	}
	if len(got.Targets) != 1 || got.Targets[0].MountPoint != "/sub" || got.Targets[0].Offset != "dir" {
		t.Errorf("with dead root /sub, /sub must be planned at offset dir, got %+v", got.Targets)
	}
}

func TestNamespaceInode(t *testing.T) {
	if n, err := NamespaceInode("mnt:[4026531840]"); err != nil || n != 4026531840 {
		t.Errorf("NamespaceInode = %d, %v", n, err)
	}
	for _, bad := range []string{"", "mnt:4026531840", "mnt:[x]", "/proc/1/ns/mnt"} {
		if _, err := NamespaceInode(bad); err == nil {
			t.Errorf("NamespaceInode(%q) accepted", bad)
		}
	}
}
