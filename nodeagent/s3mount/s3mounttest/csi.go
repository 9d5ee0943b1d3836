package s3mounttest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
)

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
	// Refuse, when set and returning an error, fails a NodePublish with it: a plugin that
	// answers but could not mount (its daemon killed before it mounted).
	Refuse func() error

	mu          sync.Mutex
	Staged      []*csi.NodeStageVolumeRequest
	Publish     []*csi.NodePublishVolumeRequest
	Unstaged    []string // staging paths
	Unpublished []string // target paths
	Sockets     []string
}

// Dial implements csiclient.Dialer.
func (f *FakeCSI) Dial(_ context.Context, socket string) (csiclient.Node, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.Sockets = append(f.Sockets, socket)
	return fakeCSINode{f}, nil
}

// Dials is how many times the plugin was dialled.
func (f *FakeCSI) Dials() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.Sockets)
}

type fakeCSINode struct{ f *FakeCSI }

func (n fakeCSINode) StageUnstage(context.Context) (bool, error) {
	if n.f.Down {
		return false, fmt.Errorf("%w: connection refused", csiclient.ErrDriverDown)
	}
	return n.f.Stages, nil
}

func (n fakeCSINode) NodeStage(_ context.Context, req *csi.NodeStageVolumeRequest) error {
	if n.f.Down {
		return fmt.Errorf("%w: connection refused", csiclient.ErrDriverDown)
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
		return fmt.Errorf("%w: connection refused", csiclient.ErrDriverDown)
	}
	n.f.mu.Lock()
	n.f.Publish = append(n.f.Publish, req)
	n.f.mu.Unlock()
	if n.f.Refuse != nil {
		if err := n.f.Refuse(); err != nil {
			return err
		}
	}
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
		return fmt.Errorf("%w: connection refused", csiclient.ErrDriverDown)
	}
	return n.unmountTop(&n.f.Unpublished, targetPath)
}

// NodeUnstage unmounts the top mount at the path.
func (n fakeCSINode) NodeUnstage(_ context.Context, _, stagingPath string) error {
	if n.f.Down {
		return fmt.Errorf("%w: connection refused", csiclient.ErrDriverDown)
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

// FakeRegistry is a csiclient.Registry for unit tests: endpoints by driver.
type FakeRegistry map[string]string

func (f FakeRegistry) Endpoint(_ context.Context, _ string, driver string) (string, bool) {
	ep, ok := f[driver]
	return ep, ok
}
