package csiclient

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrNotAttached is wrapped when the driver requires attach and the volume's VolumeAttachment
// for this node is missing or not attached: kubelet would not publish, neither does the replay.
var ErrNotAttached = errors.New("volume is not attached to this node")

// AttachmentName is kubelet's name of the VolumeAttachment of a volume on a node:
// "csi-" + sha256 hex of volumeHandle + driver + nodeName.
func AttachmentName(handle, driver, nodeName string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+nodeName)))
}

// publishContext is what kubelet passes as publish_context to NodeStageVolume and
// NodePublishVolume: nothing when the CSIDriver says attachRequired: false, else the
// VolumeAttachment's status.attachmentMetadata (read through the view; a VolumeAttachment that
// is not attached is forgotten, so the next try reads it again). Kubelet treats a driver
// without a CSIDriver object as requiring attach; the replay then uses its VolumeAttachment when
// there is one, and none when there is none (the volume was published without one, so none was
// needed: kubelet publishes an attach-requiring volume only after the attach).
func (c *Client) publishContext(ctx context.Context, pv *corev1.PersistentVolume) (map[string]string, error) {
	driver, handle := pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle
	drv, err := c.View.CSIDriver(ctx, driver)
	noDriverObject := apierrors.IsNotFound(err)
	switch {
	case noDriverObject:
	case err != nil:
		return nil, fmt.Errorf("%w: read CSIDriver %s: %w", ErrReplay, driver, err)
	case drv.Spec.AttachRequired != nil && !*drv.Spec.AttachRequired:
		return nil, nil
	}
	name := AttachmentName(handle, driver, c.NodeName)
	va, err := c.View.VolumeAttachment(ctx, name)
	switch {
	case apierrors.IsNotFound(err) && noDriverObject:
		logr.FromContextOrDiscard(ctx).V(1).Info("no CSIDriver object and no VolumeAttachment: replaying without publish context", "pv", pv.Name, "volumeAttachment", name)
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("%w: VolumeAttachment %s: %w", ErrNotAttached, name, err)
	case va.Spec.NodeName != c.NodeName || !va.Status.Attached:
		c.View.Forget("VolumeAttachment", "", name)
		return nil, fmt.Errorf("%w: VolumeAttachment %s (node %q, attached %v)", ErrNotAttached, name, va.Spec.NodeName, va.Status.Attached)
	}
	return va.Status.AttachmentMetadata, nil
}
