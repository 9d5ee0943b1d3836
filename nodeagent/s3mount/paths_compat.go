package s3mount

import "github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"

// Kubelet's CSI paths live in csiclient; these stay for the agent's other users (the benchmark
// rig, tests) that name them through s3mount.

// VolDataFile is the file kubelet's CSI plugin writes beside each volume's mount directory.
const VolDataFile = csiclient.VolDataFile

// TargetPath is the directory kubelet asks the CSI driver to publish the volume at.
func TargetPath(kubeletDir, podUID, pvName string) string {
	return csiclient.TargetPath(kubeletDir, podUID, pvName)
}

// PluginSocket is the node plugin's socket as drivers register it with kubelet.
func PluginSocket(kubeletDir, driver string) string {
	return csiclient.PluginSocket(kubeletDir, driver)
}
