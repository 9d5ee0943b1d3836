package s3mount

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
)

func attachment(node string, attached bool, meta map[string]string) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{
		ObjectMeta: metav1.ObjectMeta{Name: csiclient.AttachmentName("bkt/pv-a", testDriver, node)},
		Spec: storagev1.VolumeAttachmentSpec{Attacher: testDriver, NodeName: node,
			Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: ptr.To("pv-a")}},
		Status: storagev1.VolumeAttachmentStatus{Attached: attached, AttachmentMetadata: meta},
	}
}

// Kubelet's publish context: none when the CSIDriver says attachRequired: false; else the
// VolumeAttachment's attachmentMetadata, in NodeStageVolume and NodePublishVolume; a volume not
// attached to this node is reported and not published.
func TestReplayPublishContext(t *testing.T) {
	meta := map[string]string{"devicePath": "/dev/xvdb", "token": "t-1"}
	driver := func(attach *bool) *storagev1.CSIDriver {
		return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: testDriver}, Spec: storagev1.CSIDriverSpec{AttachRequired: attach}}
	}
	cases := []struct {
		name      string
		objs      []runtime.Object
		want      map[string]string
		published bool
	}{
		{"attach not required", []runtime.Object{driver(ptr.To(false)), attachment(testNode, true, meta)}, nil, true},
		{"attached", []runtime.Object{driver(ptr.To(true)), attachment(testNode, true, meta)}, meta, true},
		{"attach required by default (nil)", []runtime.Object{driver(nil), attachment(testNode, true, meta)}, meta, true},
		{"not attached yet", []runtime.Object{driver(ptr.To(true)), attachment(testNode, false, nil)}, nil, false},
		{"attached to another node", []runtime.Object{driver(ptr.To(true)), attachment("n2", true, meta)}, nil, false},
		{"no VolumeAttachment", []runtime.Object{driver(ptr.To(true))}, nil, false},
		{"no CSIDriver, VolumeAttachment attached", []runtime.Object{attachment(testNode, true, meta)}, meta, true},
		{"no CSIDriver, no VolumeAttachment", nil, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w, target := replayWorld(t, true, c.objs...)
			stagingPath := csiclient.KubeletStagingPath(testKubelet, testDriver, "bkt/pv-a")
			w.node.AddMount(stagingPath, "fuse.s3fs", "s3fs")
			w.node.KillMount(stagingPath)
			w.node.KillMount(target)
			w.start()
			if !c.published {
				if n, m := len(w.csi.Staged), len(w.csi.Publish); n+m != 0 {
					t.Errorf("stage %d, publish %d calls for a volume not attached here", n, m)
				}
				if n := w.events.Count(corev1.EventTypeWarning, contract.ReasonMountRestoreFailed, "NotAttached:"); n == 0 {
					t.Errorf("no NotAttached Event: %+v", w.events.All())
				}
				return
			}
			if len(w.csi.Staged) != 1 || len(w.csi.Publish) != 1 {
				t.Fatalf("stage %d, publish %d calls; want 1 and 1", len(w.csi.Staged), len(w.csi.Publish))
			}
			if d := cmp.Diff(c.want, w.csi.Staged[0].GetPublishContext()); d != "" {
				t.Errorf("NodeStageVolume publish context (-want +got):\n%s", d)
			}
			if d := cmp.Diff(c.want, w.csi.Publish[0].GetPublishContext()); d != "" {
				t.Errorf("NodePublishVolume publish context (-want +got):\n%s", d)
			}
			if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
				t.Errorf("target: %v", err)
			}
		})
	}
}
