package csiclient

import (
	"errors"
	"strings"
	"testing"
)

func TestFreshPaths(t *testing.T) {
	const k = "/var/lib/kubelet"
	if got, want := FreshPublishPath(k, "uid-1", "pv-a"), k+"/pods/uid-1/pvrescue~s3/pv-a"; got != want {
		t.Errorf("FreshPublishPath = %q, want %q", got, want)
	}
	if got, want := FreshStagePath(k, "pv-a"), k+"/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/stage"; got != want {
		t.Errorf("FreshStagePath = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		path    string
		uid, pv string
		ok      bool
		stagePV string
		stageOK bool
	}{
		{path: k + "/pods/uid-1/pvrescue~s3/pv-a", uid: "uid-1", pv: "pv-a", ok: true},
		{path: k + "/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/stage", stagePV: "pv-a", stageOK: true},
		// kubelet's own paths are never ours.
		{path: k + "/pods/uid-1/volumes/kubernetes.io~csi/pv-a/mount"},
		{path: k + "/plugins/kubernetes.io/csi/drv/0123/globalmount"},
		{path: k + "/pods/uid-1/pvrescue~s3"},
		{path: k + "/pods/uid-1/pvrescue~s3/pv-a/x"},
		{path: k + "/plugins/kubernetes.io/csi/pvrescue~s3/pv-a/globalmount"},
		{path: k + "/plugins/kubernetes.io/csi/pvrescue~s3/pv-a"},
		{path: "/elsewhere/pods/uid-1/pvrescue~s3/pv-a"},
		{path: k + "/pods/../pods/uid-1/pvrescue~s3/pv-a", uid: "uid-1", pv: "pv-a", ok: true},
	} {
		uid, pv, ok := ParseFreshPublishPath(k, tc.path)
		if uid != tc.uid || pv != tc.pv || ok != tc.ok {
			t.Errorf("ParseFreshPublishPath(%q) = %q, %q, %v; want %q, %q, %v", tc.path, uid, pv, ok, tc.uid, tc.pv, tc.ok)
		}
		spv, sok := ParseFreshStagePath(k, tc.path)
		if spv != tc.stagePV || sok != tc.stageOK {
			t.Errorf("ParseFreshStagePath(%q) = %q, %v; want %q, %v", tc.path, spv, sok, tc.stagePV, tc.stageOK)
		}
	}
}

func TestAttachmentName(t *testing.T) {
	// kubelet's getAttachmentName: "csi-" + sha256 hex of handle + driver + node, concatenated
	// (printf 'bkt/pv-aru.yandex.s3.csin1' | sha256sum).
	if got, want := AttachmentName("bkt/pv-a", "ru.yandex.s3.csi", "n1"), "csi-98a3cbdcc6b478dd3b86a0ecc735abc3b2a05b9cf98993919e7b7ff50d372d85"; got != want {
		t.Errorf("AttachmentName = %q, want %q", got, want)
	}
}

func TestTargetPath(t *testing.T) {
	tests := []struct{ kubelet, uid, pv, want string }{
		{"/var/lib/kubelet", "u1", "pv-a", "/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-a/mount"},
		{"/k/", "u2", "ns/odd", "/k/pods/u2/volumes/kubernetes.io~csi/ns~odd/mount"},
	}
	for _, tt := range tests {
		got := TargetPath(tt.kubelet, tt.uid, tt.pv)
		if got != tt.want {
			t.Errorf("TargetPath(%q,%q,%q) = %q, want %q", tt.kubelet, tt.uid, tt.pv, got, tt.want)
		}
		uid, dir, ok := ParseTargetPath(tt.kubelet, got)
		if !ok || uid != tt.uid || dir != strings.ReplaceAll(tt.pv, "/", "~") {
			t.Errorf("ParseTargetPath(%q) = %q %q %v", got, uid, dir, ok)
		}
	}
	for _, p := range []string{
		"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-a",
		"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~nfs/pv-a/mount",
		"/elsewhere/pods/u1/volumes/kubernetes.io~csi/pv-a/mount",
		"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/pv-a/mount/sub",
	} {
		if _, _, ok := ParseTargetPath("/var/lib/kubelet", p); ok {
			t.Errorf("ParseTargetPath accepted %q", p)
		}
	}
}

func TestVolData(t *testing.T) {
	good := `{"attachmentID":"","driverName":"ru.yandex.s3.csi","nodeName":"n1","specVolID":"pv-a","volumeHandle":"bkt/pv-a","volumeLifecycleMode":"Persistent"}`
	tests := []struct {
		name, data string
		wantErr    error
	}{
		{"match", good, nil},
		{"other PV", strings.Replace(good, `"specVolID":"pv-a"`, `"specVolID":"pv-b"`, 1), ErrVolData},
		{"other driver", strings.Replace(good, "ru.yandex.s3.csi", "other", 1), ErrVolData},
		{"other handle", strings.Replace(good, `"bkt/pv-a"`, `"bkt/x"`, 1), ErrVolData},
		{"only specVolID", `{"specVolID":"pv-a"}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vd, err := ParseVolData([]byte(tt.data))
			if err != nil {
				t.Fatal(err)
			}
			if err := vd.Check("pv-a", "ru.yandex.s3.csi", "bkt/pv-a"); !errors.Is(err, tt.wantErr) {
				t.Errorf("Check = %v, want %v", err, tt.wantErr)
			}
		})
	}
	if _, err := ParseVolData([]byte("{")); err == nil {
		t.Error("bad JSON accepted")
	}
}
