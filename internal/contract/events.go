package contract

// Kubernetes Event reasons the agent writes, and the Node conditions it owns (the webhook writes
// no Events). Users' alerts, dashboards and the kubectl plugin select on these values, so a value
// never changes; a reason no longer written stays, marked deprecated, for tools reading older
// agents' Events. Each reason constant is named Reason + its value.
const (
	// AgentComponent is the Event source component (and reporting controller) of the agent.
	AgentComponent = "pvrescue-agent"
)

// Lost local disks (nodeagent/localdisk). Events on the PV unless said otherwise.
const (
	// ReasonFakeDeviceCreated: a fake device stands in at the PV's missing path.
	ReasonFakeDeviceCreated = "FakeDeviceCreated"
	// ReasonFakeDeviceRetired: a fake device was removed (its disk returned or its PV is gone).
	ReasonFakeDeviceRetired = "FakeDeviceRetired"
	// ReasonDiskReturned: the real disk is back at the PV's path.
	ReasonDiskReturned = "DiskReturned"
	// ReasonLocalDiskMissing: the PV's path is missing and no fake is made (pods use it without
	// the guard, or fake devices are disabled on the node).
	ReasonLocalDiskMissing = "LocalDiskMissing"
	// ReasonLocalDiskMissingTooLong: the PV's path has been missing for localBlock.missingWarningAfter.
	ReasonLocalDiskMissingTooLong = "LocalDiskMissingTooLong"
	// ReasonFakeDeviceFailed: a fake device could not be created.
	ReasonFakeDeviceFailed = "FakeDeviceFailed"
	// ReasonLocalDiskNotFakeable: the PV's path is missing and cannot be faked.
	ReasonLocalDiskNotFakeable = "LocalDiskNotFakeable"
	// ReasonInvalidLocalPath: the PV's local path is not one the agent accepts.
	ReasonInvalidLocalPath = "InvalidLocalPath"
	// ReasonUnguardedPodOnMissingDisk (on the pod): a pod without the guard uses a missing disk.
	ReasonUnguardedPodOnMissingDisk = "UnguardedPodOnMissingDisk"
	// ReasonRealDiskReturned (on the pod): the pod runs on a fake device and its real disk is back.
	ReasonRealDiskReturned = "RealDiskReturned"
	// ReasonEvictedForRealDisk (on the pod): the pod was evicted to come back on its real disk.
	ReasonEvictedForRealDisk = "EvictedForRealDisk"
	// ReasonEvictionBlocked (on the pod): that eviction was refused.
	ReasonEvictionBlocked = "EvictionBlocked"

	// ConditionLocalDiskMissing is the Node condition set while a local disk is missing.
	ConditionLocalDiskMissing = "LocalDiskMissing"
)

// Dead S3 (FUSE) mounts (nodeagent/s3mount). Events on the pod. Tools tell the restore methods
// apart by reason, never by message.
const (
	// ReasonMountReplayed: the driver's own mount is back at the target (kubelet's calls replayed).
	ReasonMountReplayed = "MountReplayed"
	// ReasonMountBridged: the agent's own s3fs is bound over the dead target while the driver is down.
	ReasonMountBridged = "MountBridged"
	// ReasonBridgeRetired: the driver answers again; the target moved from the agent's bridge to
	// the driver's own mount.
	ReasonBridgeRetired = "BridgeRetired"
	// ReasonMountRestoreFailed: a restore attempt failed; it is retried with backoff.
	ReasonMountRestoreFailed = "MountRestoreFailed"
	// ReasonContainersRemounted: the restored mount was put back into the pod's running containers.
	ReasonContainersRemounted = "ContainersRemounted"
	// ReasonMountRestored was the one reason of every restore before the methods got their own.
	//
	// Deprecated: no longer written; read ReasonMountReplayed, ReasonMountBridged and
	// ReasonBridgeRetired.
	ReasonMountRestored = "MountRestored"

	// ReasonMountHung: a target does not answer and its daemon still holds the connection.
	ReasonMountHung = "MountHung"
	// ReasonMountHungAborted: the agent aborted a hung mount's FUSE connection (s3.abortHungAfter).
	ReasonMountHungAborted = "MountHungAborted"

	// The checks of a mount before it is bound over a kubelet path; they say what the driver (or
	// the agent's bridge) produced.

	// ReasonReplayResultNotVisible: nothing is mounted at the path, or only a directory of the
	// node's own filesystem.
	ReasonReplayResultNotVisible = "ReplayResultNotVisible"
	// ReasonReplayResultWrongFilesystem: the mount is not of the dead mount's FUSE type (nor the
	// driver profile's).
	ReasonReplayResultWrongFilesystem = "ReplayResultWrongFilesystem"
	// ReasonReplayResultSameDevice: the mount is the dead filesystem again (same device).
	ReasonReplayResultSameDevice = "ReplayResultSameDevice"
	// ReasonReplayResultNotAnswering: the mount does not answer statfs.
	ReasonReplayResultNotAnswering = "ReplayResultNotAnswering"

	// ReasonBridgeNearLimit (on the Node): a bridge, or all of them together, used
	// s3.bridgeLimits.warnPercent of a CPU or memory limit.
	ReasonBridgeNearLimit = "BridgeNearLimit"

	// ConditionS3MountHung is the Node condition set while a mount has been hung for
	// s3.hungConditionAfter.
	ConditionS3MountHung = "S3MountHung"
)

// Restored mounts in running containers (nodeagent/containermount). Events on the pod.
const (
	// ReasonMountRestoredInContainer: a container sees the restored mount again.
	ReasonMountRestoredInContainer = "MountRestoredInContainer"
	// ReasonMountRestoreInContainerFailed: putting the mount back into a container failed.
	ReasonMountRestoreInContainerFailed = "MountRestoreInContainerFailed"
	// ReasonContainerMountSkipped: the pod spec and the container's mount table disagree; the
	// container was left alone.
	ReasonContainerMountSkipped = "ContainerMountSkipped"
)

// The agent frame (nodeagent).
const (
	// ConditionAPIServerUnreachable is the Node condition the agent writes once the API server
	// answers after an outage (status False, reason ReasonReconnected).
	ConditionAPIServerUnreachable = "PVRescueAPIServerUnreachable"
	// ReasonReconnected is the reason of that condition.
	ReasonReconnected = "Reconnected"
)
