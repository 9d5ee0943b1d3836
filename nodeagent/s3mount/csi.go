package s3mount

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrDriverDown is wrapped when the node plugin's socket does not answer.
var ErrDriverDown = errors.New("CSI node plugin does not answer")

// CSIDialer connects to a CSI node plugin's unix socket.
type CSIDialer interface {
	Dial(ctx context.Context, socket string) (CSINode, error)
}

// CSINode is the part of the CSI node service the replay calls, as kubelet calls it.
type CSINode interface {
	// StageUnstage reports whether the plugin has the STAGE_UNSTAGE_VOLUME node capability.
	StageUnstage(ctx context.Context) (bool, error)
	NodeStage(ctx context.Context, req *csi.NodeStageVolumeRequest) error
	NodePublish(ctx context.Context, req *csi.NodePublishVolumeRequest) error
	// NodeUnpublish and NodeUnstage undo a replayed call at one of our fresh paths whose
	// result was refused (nothing else uses that mount; see the package doc).
	NodeUnpublish(ctx context.Context, volumeID, targetPath string) error
	NodeUnstage(ctx context.Context, volumeID, stagingPath string) error
	Close() error
}

// GRPCDialer is the real CSIDialer (gRPC over the plugin's unix socket).
type GRPCDialer struct{}

// Dial implements CSIDialer. The connection is lazy: a plugin that is down fails the first call.
func (GRPCDialer) Dial(_ context.Context, socket string) (CSINode, error) {
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDriverDown, socket, err)
	}
	return &grpcNode{conn: conn, c: csi.NewNodeClient(conn)}, nil
}

type grpcNode struct {
	conn *grpc.ClientConn
	c    csi.NodeClient
}

func (n *grpcNode) StageUnstage(ctx context.Context) (bool, error) {
	resp, err := n.c.NodeGetCapabilities(ctx, &csi.NodeGetCapabilitiesRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return false, fmt.Errorf("%w: NodeGetCapabilities: %w", ErrDriverDown, err)
	}
	for _, c := range resp.GetCapabilities() {
		if c.GetRpc().GetType() == csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME {
			return true, nil
		}
	}
	return false, nil
}

func (n *grpcNode) NodeStage(ctx context.Context, req *csi.NodeStageVolumeRequest) error {
	_, err := n.c.NodeStageVolume(ctx, req)
	return err
}

func (n *grpcNode) NodePublish(ctx context.Context, req *csi.NodePublishVolumeRequest) error {
	_, err := n.c.NodePublishVolume(ctx, req)
	return err
}

func (n *grpcNode) NodeUnpublish(ctx context.Context, volumeID, targetPath string) error {
	_, err := n.c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: targetPath})
	return err
}

func (n *grpcNode) NodeUnstage(ctx context.Context, volumeID, stagingPath string) error {
	_, err := n.c.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volumeID, StagingTargetPath: stagingPath})
	return err
}

func (n *grpcNode) Close() error { return n.conn.Close() }

// FakeCSI is an in-memory node plugin for unit tests: publishing mounts a new live FUSE
// filesystem on the FakeNode at the target (through the staging mount when it stages), and it
// records every request.
type FakeCSI struct {
	Node *FakeNode
	// Down makes every call fail as a plugin that is not running.
	Down bool
	// Stages selects the STAGE_UNSTAGE capability.
	Stages bool

	// Result, when set, replaces the mount a NodeStage or NodePublish makes at path (a driver
	// that mounts elsewhere or something else); it returns whether it handled the call.
	Result func(node *FakeNode, path string) bool

	mu          sync.Mutex
	Staged      []*csi.NodeStageVolumeRequest
	Publish     []*csi.NodePublishVolumeRequest
	Unstaged    []string // staging paths
	Unpublished []string // target paths
	Sockets     []string
	nextDevs    int
}

// Dial implements CSIDialer.
func (f *FakeCSI) Dial(_ context.Context, socket string) (CSINode, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Sockets = append(f.Sockets, socket)
	return fakeCSINode{f}, nil
}

type fakeCSINode struct{ f *FakeCSI }

func (n fakeCSINode) StageUnstage(context.Context) (bool, error) {
	if n.f.Down {
		return false, fmt.Errorf("%w: connection refused", ErrDriverDown)
	}
	return n.f.Stages, nil
}

func (n fakeCSINode) NodeStage(_ context.Context, req *csi.NodeStageVolumeRequest) error {
	if n.f.Down {
		return fmt.Errorf("%w: connection refused", ErrDriverDown)
	}
	n.f.mu.Lock()
	n.f.Staged = append(n.f.Staged, req)
	n.f.mu.Unlock()
	if top, ok := n.f.Node.Table().Top(req.GetStagingTargetPath()); ok && n.f.Node.isDead(top.Dev) {
		return errors.New("staging path: transport endpoint is not connected")
	}
	if n.f.Result != nil && n.f.Result(n.f.Node, req.GetStagingTargetPath()) {
		return nil
	}
	n.f.Node.AddMount(req.GetStagingTargetPath(), "fuse.s3fs", "s3fs")
	return nil
}

func (n fakeCSINode) NodePublish(_ context.Context, req *csi.NodePublishVolumeRequest) error {
	if n.f.Down {
		return fmt.Errorf("%w: connection refused", ErrDriverDown)
	}
	n.f.mu.Lock()
	n.f.Publish = append(n.f.Publish, req)
	n.f.mu.Unlock()
	if top, ok := n.f.Node.Table().Top(req.GetTargetPath()); ok && n.f.Node.isDead(top.Dev) {
		// What real drivers do: their mount check of the target fails with ENOTCONN.
		return errors.New("target: transport endpoint is not connected")
	}
	if n.f.Result != nil && n.f.Result(n.f.Node, req.GetTargetPath()) {
		return nil
	}
	if sp := req.GetStagingTargetPath(); sp != "" {
		return fakeMounter{n.f.Node}.Bind(sp, req.GetTargetPath(), req.GetReadonly())
	}
	n.f.Node.AddMount(req.GetTargetPath(), "fuse.s3fs", "s3fs")
	return nil
}

// NodeUnpublish unmounts the top mount at the path, as common drivers do.
func (n fakeCSINode) NodeUnpublish(_ context.Context, _, targetPath string) error {
	if n.f.Down {
		return fmt.Errorf("%w: connection refused", ErrDriverDown)
	}
	return n.unmountTop(&n.f.Unpublished, targetPath)
}

// NodeUnstage unmounts the top mount at the path.
func (n fakeCSINode) NodeUnstage(_ context.Context, _, stagingPath string) error {
	if n.f.Down {
		return fmt.Errorf("%w: connection refused", ErrDriverDown)
	}
	return n.unmountTop(&n.f.Unstaged, stagingPath)
}

// unmountTop records the call in calls and unmounts the top mount at path, if any.
func (n fakeCSINode) unmountTop(calls *[]string, path string) error {
	n.f.mu.Lock()
	*calls = append(*calls, path)
	n.f.mu.Unlock()
	if n.f.Node.Table().IsMountPoint(path) {
		return fakeMounter{n.f.Node}.Unmount(path, false)
	}
	return nil
}

// Calls returns what was unstaged and unpublished so far.
func (f *FakeCSI) Calls() (unstaged, unpublished []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.Unstaged), slices.Clone(f.Unpublished)
}

func (fakeCSINode) Close() error { return nil }
