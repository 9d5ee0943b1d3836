// Package s3mount restores lost s3fs mounts on a node.
//
// When an s3fs-based CSI node plugin restarts, its s3fs processes die and every pod volume they
// served answers ENOTCONN. Unmounting the dead target and mounting again does not reach running
// containers, so the Restorer mounts s3fs at an agent-owned staging directory (one per PV) and
// bind-mounts it on top of each dead target; with HostToContainer propagation the running
// containers see the data again at once.
//
// The split follows node-problem-detector and the local static provisioner: discovery (pods,
// PVs and their kubelet paths), pure parsing (mountinfo, vol_data.json, driver attributes), and
// repair (staging mounts, binds) behind the OS interfaces in os.go.
package s3mount
