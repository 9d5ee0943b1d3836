package csiclient

import (
	"path/filepath"
	"strings"

	utilstrings "k8s.io/utils/strings"
)

// freshDirName is the directory of ours inside the two kubelet directories a node plugin deployed
// by its upstream manifest sees (<kubelet>/pods and <kubelet>/plugins/kubernetes.io/csi). "~" is
// not allowed in a CSI driver name nor in a directory kubelet creates under a pod's directory, so
// it never collides with either (kubelet itself escapes "kubernetes.io/csi" as kubernetes.io~csi).
const freshDirName = "pvrescue~s3"

// FreshPublishPath is where the agent asks a node plugin to publish a PV again for one pod before
// the result is bound over the pod's dead target: <kubelet>/pods/<podUID>/pvrescue~s3/<pv>.
//
// It lies in the pod's own directory, which the plugin sees (it mounts <kubelet>/pods), and
// outside volumes/, which kubelet scans to reconstruct and tear down volumes. While the pod
// lives kubelet does not touch other directories in it; once the pod is gone kubelet's orphan
// cleanup removes the empty directories there and refuses (and retries later) a mount point, so
// a left-over of ours can delay the removal of a gone pod's directory but never confuse kubelet.
func FreshPublishPath(kubeletDir, podUID, pvName string) string {
	return filepath.Join(kubeletDir, "pods", podUID, freshDirName, utilstrings.EscapeQualifiedName(pvName))
}

// ParseFreshPublishPath is the inverse of FreshPublishPath (pvEscaped as it appears in the path).
func ParseFreshPublishPath(kubeletDir, path string) (podUID, pvEscaped string, ok bool) {
	rel, err := filepath.Rel(filepath.Join(kubeletDir, "pods"), path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", "", false
	}
	p := strings.Split(rel, string(filepath.Separator))
	if len(p) != 3 || p[1] != freshDirName || p[0] == "" || p[2] == "" {
		return "", "", false
	}
	return p[0], p[2], true
}

// freshStageRoot is <kubelet>/plugins/kubernetes.io/csi/pvrescue~s3.
func freshStageRoot(kubeletDir string) string {
	return filepath.Join(kubeletDir, "plugins", "kubernetes.io", "csi", freshDirName)
}

// FreshStagePath is where the agent asks a staging node plugin to stage a PV again before the
// result is bound over kubelet's dead staging path:
// <kubelet>/plugins/kubernetes.io/csi/pvrescue~s3/<pv>/stage.
//
// The plugin sees it (it mounts <kubelet>/plugins/kubernetes.io/csi). It is not inside a
// <driver>/<sha256> directory, which kubelet's unmountDevice cleans (globalmount, vol_data.json,
// the directory when empty), and holds no vol_data.json: kubelet never parses it.
func FreshStagePath(kubeletDir, pvName string) string {
	return filepath.Join(freshStageRoot(kubeletDir), utilstrings.EscapeQualifiedName(pvName), "stage")
}

// ParseFreshStagePath is the inverse of FreshStagePath.
func ParseFreshStagePath(kubeletDir, path string) (pvEscaped string, ok bool) {
	rel, err := filepath.Rel(freshStageRoot(kubeletDir), path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", false
	}
	p := strings.Split(rel, string(filepath.Separator))
	if len(p) != 2 || p[0] == "" || p[1] != "stage" {
		return "", false
	}
	return p[0], true
}
