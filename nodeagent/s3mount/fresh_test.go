package s3mount

import "testing"

func TestFreshPaths(t *testing.T) {
	const k = "/var/lib/kubelet"
	if got, want := FreshPublishPath(k, "uid-1", "pv-a"), k+"/pods/uid-1/pvrescue~s3/pv-a"; got != want {
		t.Errorf("FreshPublishPath = %q, want %q", got, want)
	}
	if got, want := FreshStagePath(k, "pv-a"), k+"/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/stage"; got != want {
		t.Errorf("FreshStagePath = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		path     string
		uid, pv  string
		ok       bool
		stagePV  string
		stageOK  bool
		anyFresh bool
	}{
		{path: k + "/pods/uid-1/pvrescue~s3/pv-a", uid: "uid-1", pv: "pv-a", ok: true, anyFresh: true},
		{path: k + "/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/stage", stagePV: "pv-a", stageOK: true, anyFresh: true},
		// kubelet's own paths are never ours.
		{path: k + "/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount"},
		{path: k + "/plugins/kubernetes.io/csi/drv/0123/globalmount"},
		{path: k + "/pods/uid-1/pvrescue~s3"},
		{path: k + "/pods/uid-1/pvrescue~s3/pv-a/x"},
		{path: k + "/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/globalmount"},
		{path: k + "/plugins/kubernetes.io/csi/pvrescue~s3/pv-a"},
		{path: "/elsewhere/pods/uid-1/pvrescue~s3/pv-a"},
		{path: k + "/pods/../pods/uid-1/pvrescue~s3/pv-a", uid: "uid-1", pv: "pv-a", ok: true, anyFresh: true},
	} {
		uid, pv, ok := ParseFreshPublishPath(k, tc.path)
		if uid != tc.uid || pv != tc.pv || ok != tc.ok {
			t.Errorf("ParseFreshPublishPath(%q) = %q, %q, %v; want %q, %q, %v", tc.path, uid, pv, ok, tc.uid, tc.pv, tc.ok)
		}
		spv, sok := ParseFreshStagePath(k, tc.path)
		if spv != tc.stagePV || sok != tc.stageOK {
			t.Errorf("ParseFreshStagePath(%q) = %q, %v; want %q, %v", tc.path, spv, sok, tc.stagePV, tc.stageOK)
		}
		if got := isFreshPath(k, tc.path); got != tc.anyFresh {
			t.Errorf("isFreshPath(%q) = %v", tc.path, got)
		}
	}
}
