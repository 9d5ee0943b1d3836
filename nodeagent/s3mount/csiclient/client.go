package csiclient

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// View is what the client reads of the cluster (nodeagent.ClusterView has it).
type View interface {
	PersistentVolume(ctx context.Context, name string) (*corev1.PersistentVolume, error)
	CSIDriver(ctx context.Context, name string) (*storagev1.CSIDriver, error)
	VolumeAttachment(ctx context.Context, name string) (*storagev1.VolumeAttachment, error)
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	Forget(kind, namespace, name string)
}

// Client talks to this node's CSI node plugins as kubelet does, for the S3 rescue: it finds a
// driver's socket (Registry, else <kubelet>/plugins/<driver>/csi.sock), opens a Session on it,
// and keeps the fresh directories of ours the plugin publishes and stages at.
type Client struct {
	Dialer Dialer
	// Registry finds plugins through kubelet's plugin registration; nil: the usual socket only.
	Registry Registry
	View     View
	NodeName string
	Config   *config.Config
	// Timeout bounds one session (Options.MountTimeout of the rescue).
	Timeout time.Duration
	Mounter stack.Mounter
	Statfs  stack.StatfsChecker
	FS      stack.FS
	Rules   *stack.Rules
}

// pluginSocket is the socket of driver's node plugin: the registered endpoint, else the usual
// path.
func (c *Client) pluginSocket(ctx context.Context, driver string) string {
	if c.Registry != nil {
		if ep, ok := c.Registry.Endpoint(ctx, c.Config.KubeletDir, driver); ok {
			return ep
		}
	}
	return PluginSocket(c.Config.KubeletDir, driver)
}

// Session is one conversation with a PV's node plugin, opened the way every replayed call
// needs it: the plugin dialled, its STAGE_UNSTAGE capability read, the volume's capability and
// publish context (the VolumeAttachment's metadata) known, and kubelet's staging path when the
// plugin stages. Both the replay of a dead target and the retire of a bridge use one.
type Session struct {
	c    *Client
	node Node
	PV   *corev1.PersistentVolume
	// Stages: the plugin has STAGE_UNSTAGE_VOLUME.
	Stages         bool
	Capability     *csi.VolumeCapability
	PublishContext map[string]string
	// StagingPath is kubelet's staging path (globalmount) when the plugin stages, else "".
	StagingPath string
}

// Open dials pv's node plugin and prepares a session. It fails with ErrDriverDown while the
// plugin does not answer, and with ErrNotAttached or ErrReplay when the volume's publish context
// cannot be read (the plugin answers).
func (c *Client) Open(ctx context.Context, pv *corev1.PersistentVolume) (*Session, error) {
	node, stages, err := c.dial(ctx, pv.Spec.CSI.Driver)
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, node: node, PV: pv, Stages: stages, Capability: VolumeCapability(pv)}
	if s.PublishContext, err = c.publishContext(ctx, pv); err != nil {
		_ = node.Close()
		return nil, err
	}
	if stages {
		s.StagingPath = KubeletStagingPath(c.Config.KubeletDir, pv.Spec.CSI.Driver, pv.Spec.CSI.VolumeHandle)
	}
	return s, nil
}

// Answers asks driver's node plugin for its capabilities, as Open does first, and says whether
// it answered: ErrDriverDown when it does not. It needs only the driver's name, so a restore can
// ask it while the PV is still being read.
func (c *Client) Answers(ctx context.Context, driver string) error {
	node, _, err := c.dial(ctx, driver)
	if err == nil {
		_ = node.Close() // a probe's connection: nothing was asked of the plugin
	}
	return err
}

// dial connects to driver's node plugin and asks whether it stages (which fails while it does
// not answer).
func (c *Client) dial(ctx context.Context, driver string) (Node, bool, error) {
	node, err := c.Dialer.Dial(ctx, c.pluginSocket(ctx, driver))
	if err != nil {
		return nil, false, err
	}
	stages, err := node.StageUnstage(ctx)
	if err != nil {
		_ = node.Close()
		return nil, false, err
	}
	return node, stages, nil
}

// Close closes the connection to the plugin.
func (s *Session) Close() error { return s.node.Close() }

// Request is kubelet's NodePublishVolume request for pod at targetPath (a fresh path of ours):
// the PV's nodePublishSecretRef read, and the volume context with pod info when the CSIDriver
// asks for it.
func (s *Session) Request(ctx context.Context, pod *corev1.Pod, targetPath string, readOnly bool) (*csi.NodePublishVolumeRequest, error) {
	secrets, err := s.c.secretData(ctx, s.PV.Spec.CSI.NodePublishSecretRef)
	if err != nil {
		return nil, err
	}
	volCtx, err := s.c.volumeContext(ctx, s.PV, pod)
	if err != nil {
		return nil, err
	}
	return &csi.NodePublishVolumeRequest{
		VolumeId: s.PV.Spec.CSI.VolumeHandle, PublishContext: s.PublishContext, StagingTargetPath: s.StagingPath, TargetPath: targetPath,
		VolumeCapability: s.Capability, Readonly: readOnly, Secrets: secrets, VolumeContext: volCtx,
	}, nil
}

// Publish asks the plugin to publish req at its target, a fresh directory of ours emptied
// first (table: the mount table now); a failed call is undone (Undo).
func (s *Session) Publish(ctx context.Context, req *csi.NodePublishVolumeRequest, table stack.Table) error {
	if err := s.c.freshDir(req.TargetPath, table); err != nil {
		return err
	}
	if err := s.node.NodePublish(ctx, req); err != nil {
		s.Undo(ctx, req.TargetPath)
		return replayErr("NodePublishVolume", err)
	}
	return nil
}

// Undo removes the plugin's mount at a fresh publish path of ours whose result was not put at
// kubelet's path: see undoFresh.
func (s *Session) Undo(ctx context.Context, fresh string) {
	s.c.undoFresh(ctx, s.node, s.PV.Spec.CSI.VolumeHandle, fresh, false)
}

// DropFresh removes a fresh directory of ours after its mount went to kubelet's path.
func (s *Session) DropFresh(ctx context.Context, fresh string) { s.c.DropFresh(ctx, fresh) }

// Volume-context keys kubelet adds when the CSIDriver sets podInfoOnMount.
const (
	CtxPodName        = "csi.storage.k8s.io/pod.name"
	CtxPodNamespace   = "csi.storage.k8s.io/pod.namespace"
	CtxPodUID         = "csi.storage.k8s.io/pod.uid"
	CtxServiceAccount = "csi.storage.k8s.io/serviceAccount.name"
	CtxEphemeral      = "csi.storage.k8s.io/ephemeral"
)

// Restage stages the volume again, when the plugin stages and kubelet's staging path is not the
// driver's live mount (dead, or our bridge): the plugin stages at a fresh directory, whose mount
// then replaces the dead one at kubelet's staging path (stack.Rules.Put: beneath it, the dead one
// detached; on top where mounts are stacked — no container uses that path) and the fresh
// directory is unmounted. Our own mounts on top there (a bridge, a dead mount we put there
// earlier) go first, so the stack stays the driver's dead mount plus one live mount.
func (s *Session) Restage(ctx context.Context) error {
	if !s.Stages {
		return nil
	}
	c, pv, stagingPath, fresh := s.c, s.PV, s.StagingPath, FreshStagePath(s.c.Config.KubeletDir, s.PV.Name)
	table, err := c.Mounter.MountTable()
	if err != nil {
		return err
	}
	mounted := table.IsMountPoint(stagingPath)
	if top, ok := table.Top(stagingPath); ok {
		if _, ours := stack.PVFromFSName(top.Source); !ours && c.Statfs.Statfs(ctx, stagingPath, c.Config.S3.StatfsTimeout.Duration) == nil {
			return nil // the driver's staging is live
		}
	}
	secrets, err := c.secretData(ctx, pv.Spec.CSI.NodeStageSecretRef)
	if err != nil {
		return err
	}
	if err := c.freshDir(fresh, table); err != nil {
		return err
	}
	if err := s.node.NodeStage(ctx, &csi.NodeStageVolumeRequest{
		VolumeId: pv.Spec.CSI.VolumeHandle, StagingTargetPath: fresh, VolumeCapability: s.Capability,
		PublishContext: s.PublishContext, Secrets: secrets, VolumeContext: pv.Spec.CSI.VolumeAttributes,
	}); err != nil {
		c.undoFresh(ctx, s.node, pv.Spec.CSI.VolumeHandle, fresh, true)
		return replayErr("NodeStageVolume", err)
	}
	if _, err := c.Rules.Check(ctx, fresh, stack.CheckFor(table, stagingPath, c.Config.S3.Profile(pv.Spec.CSI.Driver).FUSETypeOf(pv.Spec.CSI.VolumeAttributes))); err != nil {
		c.undoFresh(ctx, s.node, pv.Spec.CSI.VolumeHandle, fresh, true)
		return err
	}
	defer c.DropFresh(ctx, fresh)
	if !mounted {
		// Only a path that is not a mount point may need creating: on a dead FUSE mount point
		// stat fails with ENOTCONN and mkdir with EEXIST.
		if err := c.FS.MkdirAll(stagingPath, 0o750); err != nil {
			return fmt.Errorf("%w: create %s: %w", stack.ErrMount, stagingPath, err)
		}
	}
	if err := c.Rules.DropOurTops(ctx, stagingPath); err != nil {
		return err
	}
	if err := c.Rules.Put(ctx, fresh, stagingPath, false); err != nil {
		return err
	}
	c.Rules.RecordTop(ctx, stagingPath, "the restaged mount")
	return nil
}

// DropFresh removes a fresh directory of ours once its mount is at kubelet's path: the mounts there (the driver's,
// whose FUSE connection now lives on in the bind at kubelet's path) are detached by the agent
// itself, never through the driver's NodeUnpublishVolume/NodeUnstageVolume — see the package
// doc — and the directory, with its parent of ours when empty, removed.
func (c *Client) DropFresh(ctx context.Context, fresh string) {
	log := logr.FromContextOrDiscard(ctx)
	if table, err := c.Mounter.MountTable(); err == nil {
		c.Rules.UnmountAll(fresh, table)
		if table, err = c.Mounter.MountTable(); err == nil && table.IsMountPoint(fresh) {
			log.Error(stack.ErrMount, "a fresh directory of ours is still mounted; it stays until the next start", "path", fresh)
			return
		}
	}
	for _, p := range []string{fresh, filepath.Dir(fresh)} {
		if err := c.FS.Remove(p); err != nil {
			log.V(1).Info("fresh directory not removed", "path", p, "err", err.Error())
			return
		}
	}
}

// undoFresh removes the driver's mount at a fresh path of ours whose result was not put
// over the dead mount (refused, or the call failed half-way): through the driver first — that mount serves
// nothing else, so its NodeUnpublishVolume/NodeUnstageVolume may wait for or stop the daemon
// behind it, and it is the only way to reach a mount the node does not see — then whatever is
// still visible there is detached by the agent and the directory removed.
func (c *Client) undoFresh(ctx context.Context, node Node, volumeID, fresh string, stage bool) {
	c.undoCall(ctx, node, volumeID, fresh, stage)
	c.DropFresh(ctx, fresh)
}

// freshDir makes dir an empty directory with nothing mounted (it is ours: left-overs go).
func (c *Client) freshDir(dir string, table stack.Table) error {
	c.Rules.UnmountAll(dir, table)
	if err := c.FS.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("%w: create %s: %w", stack.ErrMount, dir, err)
	}
	return nil
}

// ErrSecretNotFound: the Secret a PV names for the driver's credentials cannot be read. Both
// ways of restoring read it (replay here, for the driver; the bridge in s3mount, for our s3fs),
// and s3mount reports it as SecretNotFound. It lives here, not in s3fs, so neither package needs
// the other for it.
var ErrSecretNotFound = errors.New("credentials secret not found")

// secretData reads a secret kubelet would pass (nil ref: none) as the CSI secrets map.
func (c *Client) secretData(ctx context.Context, ref *corev1.SecretReference) (map[string]string, error) {
	if ref == nil || ref.Name == "" {
		return nil, nil
	}
	s, err := c.View.Secret(ctx, ref.Namespace, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %s/%s: %w", ErrSecretNotFound, ref.Namespace, ref.Name, err)
	}
	out := make(map[string]string, len(s.Data)+len(s.StringData))
	for k, v := range s.Data {
		out[k] = string(v)
	}
	return out, nil
}

// volumeContext is the PV's volume attributes plus, when the CSIDriver sets podInfoOnMount,
// the pod information kubelet adds.
func (c *Client) volumeContext(ctx context.Context, pv *corev1.PersistentVolume, pod *corev1.Pod) (map[string]string, error) {
	out := map[string]string{}
	maps.Copy(out, pv.Spec.CSI.VolumeAttributes)
	drv, err := c.View.CSIDriver(ctx, pv.Spec.CSI.Driver)
	if apierrors.IsNotFound(err) {
		return out, nil // no CSIDriver object: kubelet adds no pod info either
	}
	if err != nil {
		// Never replay with a context that may lack what kubelet would add.
		return nil, fmt.Errorf("%w: read CSIDriver %s: %w", ErrReplay, pv.Spec.CSI.Driver, err)
	}
	if drv.Spec.PodInfoOnMount != nil && *drv.Spec.PodInfoOnMount {
		out[CtxPodName] = pod.Name
		out[CtxPodNamespace] = pod.Namespace
		out[CtxPodUID] = string(pod.UID)
		out[CtxServiceAccount] = pod.Spec.ServiceAccountName
		out[CtxEphemeral] = "false"
	}
	return out, nil
}

// VolumeCapability is the capability kubelet sends for a filesystem PV: its first access mode
// mapped to the CSI one, its fsType and mount options.
func VolumeCapability(pv *corev1.PersistentVolume) *csi.VolumeCapability {
	mode := csi.VolumeCapability_AccessMode_UNKNOWN
	if len(pv.Spec.AccessModes) > 0 {
		switch pv.Spec.AccessModes[0] {
		case corev1.ReadWriteOnce:
			mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
		case corev1.ReadOnlyMany:
			mode = csi.VolumeCapability_AccessMode_MULTI_NODE_READER_ONLY
		case corev1.ReadWriteMany:
			mode = csi.VolumeCapability_AccessMode_MULTI_NODE_MULTI_WRITER
		case corev1.ReadWriteOncePod:
			mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER
		}
	}
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{
			FsType: pv.Spec.CSI.FSType, MountFlags: pv.Spec.MountOptions}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode},
	}
}

// replayErr is a replayed call's failure: ErrReplay when the plugin refused it, ErrDriverDown
// (as it is) when the plugin went away under it.
func replayErr(call string, err error) error {
	if errors.Is(err, ErrDriverDown) {
		return fmt.Errorf("%s: %w", call, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrReplay, call, err)
}
