package containermount

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// RemountRequest asks to put a restored FUSE mount back into the running containers of one pod.
//
// It mirrors nodeagent.RemountRequest, the contract s3mount calls through; once that type is on
// main this becomes an alias of it.
type RemountRequest struct {
	// Pod whose containers are searched (by its UID in /proc/<pid>/cgroup).
	Pod *corev1.Pod
	// DeadDevice is "major:minor" of the dead FUSE connection, as in mountinfo.
	DeadDevice string
	// DeadRoot is the mountinfo root of the dead mount at the pod's host target (usually "/").
	DeadRoot string
	// LivePath is the host path (the pod's volume target) where the live mount now is, as the
	// agent's own mount namespace sees it.
	LivePath string
}

// RemountResult says what one pass did. Keys are "<container>:<mount point>", where
// <container> is the container's name (several joined by "+" when they share one mount
// namespace) or "pid <N>" when no container status matches.
type RemountResult struct {
	Fixed  []string
	Failed map[string]error
	// Untouched counts container mount points of the volume already on a live mount.
	Untouched int
}

// ContainerRemounter is what the agent calls after each restore (nodeagent.ContainerRemounter).
type ContainerRemounter interface {
	RemountInContainers(ctx context.Context, req RemountRequest) (RemountResult, error)
}
