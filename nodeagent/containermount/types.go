package containermount

import "github.com/pvrescue/pvrescue/nodeagent"

// RemountRequest is the contract s3mount calls through (nodeagent.RemountRequest).
type RemountRequest = nodeagent.RemountRequest

// RemountResult says what one pass did (nodeagent.RemountResult). Keys of Fixed and Failed are
// "<container>:<mount point inside the container>", where <container> is the container's name
// (several joined by "+" when they share one mount namespace) or "pid <N>" when no container
// status matches; Untouched counts container mount points of the volume already on a live mount.
type RemountResult = nodeagent.RemountResult

// RemountOutcome is one request's answer in RemountPods.
type RemountOutcome = nodeagent.RemountOutcome

var _ nodeagent.ContainerRemounter = (*Remounter)(nil)
