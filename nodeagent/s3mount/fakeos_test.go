package s3mount

import "github.com/pvrescue/pvrescue/nodeagent/s3mount/s3mounttest"

// fakeOS is the rescue's OS on an in-memory node (no CSI plugin: tests set one when they replay).
func fakeOS(n *s3mounttest.FakeNode) OS {
	return OS{Mounter: n.Mounter(), Procs: n.Procs(), Cgroups: n.Cgroups(), Statfs: n.Statfs(), FS: n.FS(), FUSE: n.FUSE()}
}
