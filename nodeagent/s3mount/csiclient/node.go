package csiclient

import (
	"context"
	"errors"
	"fmt"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// ErrDriverDown is wrapped when the node plugin's socket does not answer.
var ErrDriverDown = errors.New("CSI node plugin does not answer")

// ErrReplay is wrapped when the driver refuses a replayed call.
var ErrReplay = errors.New("the driver refused the replayed call")

// Dialer connects to a CSI node plugin's unix socket.
type Dialer interface {
	// Dial returns the node service at socket; a plugin that does not answer fails with
	// ErrDriverDown (here or at its first call).
	Dial(ctx context.Context, socket string) (Node, error)
}

// Node is the part of the CSI node service the replay calls, as kubelet calls it.
type Node interface {
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

// GRPCDialer is the real Dialer (gRPC over the plugin's unix socket).
type GRPCDialer struct{}

// Dial implements Dialer. The connection is lazy: a plugin that is down fails the first call.
func (GRPCDialer) Dial(_ context.Context, socket string) (Node, error) {
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
	return wentAway(err)
}

func (n *grpcNode) NodePublish(ctx context.Context, req *csi.NodePublishVolumeRequest) error {
	_, err := n.c.NodePublishVolume(ctx, req)
	return wentAway(err)
}

func (n *grpcNode) NodeUnpublish(ctx context.Context, volumeID, targetPath string) error {
	_, err := n.c.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: volumeID, TargetPath: targetPath})
	return wentAway(err)
}

func (n *grpcNode) NodeUnstage(ctx context.Context, volumeID, stagingPath string) error {
	_, err := n.c.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: volumeID, StagingTargetPath: stagingPath})
	return wentAway(err)
}

// wentAway wraps ErrDriverDown around a call that failed because the plugin went away under it
// (gRPC Unavailable: its connection closed mid-call, as when the plugin restarts again while a
// replay runs): the plugin does not answer, it did not refuse. Taken for a refusal, the restore
// backed off for 2 s although the next plugin served a moment later (a bench incident of a
// plugin restarted twice took 2.15 s).
func wentAway(err error) error {
	if err != nil && status.Code(err) == codes.Unavailable {
		return fmt.Errorf("%w: %w", ErrDriverDown, err)
	}
	return err
}

func (n *grpcNode) Close() error { return n.conn.Close() }
