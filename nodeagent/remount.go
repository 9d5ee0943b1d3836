package nodeagent

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// RemountRequest asks to put a restored FUSE mount back into the running containers of one pod.
type RemountRequest struct {
	// Pod is the pod whose containers are searched (by its UID in /proc/<pid>/cgroup).
	Pod *corev1.Pod
	// DeadDevice is "major:minor" of the dead FUSE connection, as mountinfo shows it.
	DeadDevice string
	// DeadRoot is the mountinfo root of the dead mount at the pod's host target (usually "/"); a
	// container mount's offset inside the volume (its subPath) is its own root relative to this.
	DeadRoot string
	// LivePath is the host path (the pod's volume target) where the live mount now is.
	LivePath string
}

// RemountResult says what a RemountInContainers pass did.
type RemountResult struct {
	// Fixed names each container (or pid:mountpoint when the name is unknown) now on the live mount.
	Fixed []string
	// Failed maps the same kind of name to why it could not be fixed.
	Failed map[string]error
	// Untouched counts container mounts of the volume that were already live.
	Untouched int
}

// ContainerRemounter puts a restored mount back inside running containers, so that no container
// has to restart after a FUSE loss. A nil ContainerRemounter in Deps means the feature is off.
type ContainerRemounter interface {
	RemountInContainers(ctx context.Context, req RemountRequest) (RemountResult, error)
	// RemountPods does RemountInContainers for each request, in order, as one pass (one restore
	// pass's pods): what does not depend on the pod is read once. One outcome per request.
	RemountPods(ctx context.Context, reqs []RemountRequest) []RemountOutcome
}

// RemountOutcome is one request's answer in RemountPods: what RemountInContainers returns.
type RemountOutcome struct {
	Result RemountResult
	Err    error
}

// RemountEach answers RemountPods with one RemountInContainers per request, for remounters
// that share nothing between pods (stand-ins in tests and benchmarks).
func RemountEach(ctx context.Context, r ContainerRemounter, reqs []RemountRequest) []RemountOutcome {
	out := make([]RemountOutcome, len(reqs))
	for i, req := range reqs {
		out[i].Result, out[i].Err = r.RemountInContainers(ctx, req)
	}
	return out
}
