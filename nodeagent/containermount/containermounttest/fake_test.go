package containermounttest_test

import (
	"testing"

	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/containermount/containermounttest"
)

// CgroupProcFS answers for its pids, passes the others through, and PodCgroup is a cgroup the
// remounter's parser places in the pod's container.
func TestCgroupProcFS(t *testing.T) {
	const uid, cid = "6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8", "0123456789abcdef"
	f := containermounttest.NewFakeNode(1)
	f.AddProc(7, containermounttest.FakeProc{Cgroup: "0::/init.scope\n", MountNS: 1})
	p := containermounttest.CgroupProcFS{ProcFS: f.OS().Proc, Cgroups: map[int]string{8: containermounttest.PodCgroup(uid, cid)}}
	if got, err := p.Cgroup(7); err != nil || got != "0::/init.scope\n" {
		t.Errorf("Cgroup(7) = %q, %v; want the wrapped ProcFS's answer", got, err)
	}
	cg, err := p.Cgroup(8)
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := containermount.ParseCgroup(cg); !ok || info.PodUID != uid || info.ContainerID != cid {
		t.Errorf("ParseCgroup(PodCgroup) = %+v, %v; want the pod's UID and container ID", info, ok)
	}
	if _, err := p.Cgroup(9); err == nil {
		t.Error("Cgroup of an unknown pid answered")
	}
}

// The formatter is the parser's inverse (the fake relies on it).
func TestFormatMountInfoRoundTrip(t *testing.T) {
	content := "23 1 0:21 / / rw,relatime shared:1 - overlay overlay rw\n" +
		"501 23 0:55 /sub/dir /my\\040path ro,relatime master:7 - fuse.s3fs s3fs rw\n"
	got, err := containermount.ParseMountInfo(content)
	if err != nil {
		t.Fatal(err)
	}
	if out := containermounttest.FormatMountInfo(got); out != content {
		t.Errorf("FormatMountInfo = %q, want %q", out, content)
	}
}
