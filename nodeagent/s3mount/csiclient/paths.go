package csiclient

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	utilstrings "k8s.io/utils/strings"
)

// csiPluginDir is kubelet's directory name for CSI volumes (kubernetes.io/csi, escaped).
var csiPluginDir = utilstrings.EscapeQualifiedName("kubernetes.io/csi")

// VolDataFile is the file kubelet's CSI plugin writes beside each volume's mount directory.
const VolDataFile = "vol_data.json"

// ErrVolData is wrapped when vol_data.json does not describe the expected volume.
var ErrVolData = errors.New("vol_data.json does not match")

// TargetPath is the directory kubelet asks the CSI driver to publish the volume at:
// <kubeletDir>/pods/<podUID>/volumes/kubernetes.io~csi/<escaped PV name>/mount.
func TargetPath(kubeletDir, podUID, pvName string) string {
	return filepath.Join(kubeletDir, "pods", podUID, "volumes", csiPluginDir, utilstrings.EscapeQualifiedName(pvName), "mount")
}

// ParseTargetPath is the inverse of TargetPath: it returns the pod UID and the escaped volume
// directory name, or ok=false for any path not of that shape.
func ParseTargetPath(kubeletDir, path string) (podUID, volDir string, ok bool) {
	rel, err := filepath.Rel(filepath.Join(kubeletDir, "pods"), path)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", "", false
	}
	p := strings.Split(rel, string(filepath.Separator))
	if len(p) != 5 || p[1] != "volumes" || p[2] != csiPluginDir || p[4] != "mount" || p[0] == "" || p[3] == "" {
		return "", "", false
	}
	return p[0], p[3], true
}

// VolData is kubelet's vol_data.json (the fields we cross-check).
type VolData struct {
	SpecVolID    string `json:"specVolID"`
	VolumeHandle string `json:"volumeHandle"`
	DriverName   string `json:"driverName"`
	NodeName     string `json:"nodeName"`
}

// ParseVolData decodes vol_data.json.
func ParseVolData(data []byte) (VolData, error) {
	var v VolData
	if err := json.Unmarshal(data, &v); err != nil {
		return VolData{}, fmt.Errorf("decode %s: %w", VolDataFile, err)
	}
	return v, nil
}

// Check reports whether vol_data.json describes the PV we derived the path from; a mismatch
// means the path is not the volume we think it is, and we must not touch it.
func (v VolData) Check(pvName, driver, handle string) error {
	switch {
	case v.SpecVolID != pvName:
		return fmt.Errorf("%w: specVolID %q, want PV %q", ErrVolData, v.SpecVolID, pvName)
	case v.DriverName != "" && v.DriverName != driver:
		return fmt.Errorf("%w: driverName %q, want %q", ErrVolData, v.DriverName, driver)
	case v.VolumeHandle != "" && v.VolumeHandle != handle:
		return fmt.Errorf("%w: volumeHandle %q, want %q", ErrVolData, v.VolumeHandle, handle)
	}
	return nil
}

// KubeletStagingPath is where kubelet asks a STAGE_UNSTAGE driver to stage a volume:
// <kubelet>/plugins/kubernetes.io/csi/<driver>/<sha256 hex of the volume handle>/globalmount.
func KubeletStagingPath(kubeletDir, driver, handle string) string {
	sum := sha256.Sum256([]byte(handle))
	return filepath.Join(kubeletDir, "plugins", "kubernetes.io", "csi", driver, hex.EncodeToString(sum[:]), "globalmount")
}

// PluginSocket is the node plugin's socket as drivers register it with kubelet:
// <kubelet>/plugins/<driver>/csi.sock.
func PluginSocket(kubeletDir, driver string) string {
	return filepath.Join(kubeletDir, "plugins", driver, "csi.sock")
}
