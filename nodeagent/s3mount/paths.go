package s3mount

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	utilstrings "k8s.io/utils/strings"

	"github.com/pvrescue/pvrescue/internal/statename"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// csiPluginDir is kubelet's directory name for CSI volumes (kubernetes.io/csi, escaped).
var csiPluginDir = utilstrings.EscapeQualifiedName("kubernetes.io/csi")

// VolDataFile is the file kubelet's CSI plugin writes beside each volume's mount directory.
const VolDataFile = "vol_data.json"

// ErrVolData is wrapped when vol_data.json does not describe the expected volume.
var ErrVolData = errors.New("vol_data.json does not match")

// VolumeDir is <kubeletDir>/pods/<podUID>/volumes/kubernetes.io~csi/<escaped PV name>.
func VolumeDir(kubeletDir, podUID, pvName string) string {
	return filepath.Join(kubeletDir, "pods", podUID, "volumes", csiPluginDir, utilstrings.EscapeQualifiedName(pvName))
}

// TargetPath is the directory kubelet asks the CSI driver to publish the volume at.
func TargetPath(kubeletDir, podUID, pvName string) string {
	return filepath.Join(VolumeDir(kubeletDir, podUID, pvName), "mount")
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

// Layout is where the restorer keeps its own state under the agent's state directory.
type Layout struct{ StateDir string }

// Root is <stateDir>/s3.
func (l Layout) Root() string { return filepath.Join(l.StateDir, "s3") }

// StagingRoot holds one staging mount per PV.
func (l Layout) StagingRoot() string { return filepath.Join(l.Root(), "staging") }

// PVComponent is the one path component every per-PV file, directory and cgroup of ours is named
// by: the PV name itself when short (names earlier agents used), else a bounded hashed form
// (statename), with room left for the longest suffix added to it (".passwd" plus a temporary
// file's "." and ".tmp"; a cgroup's "-<pid>"). A stem read back from a name maps to itself.
func PVComponent(pvName string) string {
	return statename.Component(pvName, "", len(".passwd")+len("..tmp"))
}

// Staging is the s3fs mount of one PV, bound onto its pods' targets.
func (l Layout) Staging(pvName string) string {
	return filepath.Join(l.StagingRoot(), PVComponent(pvName))
}

// CredsDir is a small tmpfs holding passwd files, so credentials never reach the node's disk.
func (l Layout) CredsDir() string { return filepath.Join(l.Root(), "creds") }

// PasswdFile is the s3fs passwd_file of one PV.
func (l Layout) PasswdFile(pvName string) string {
	return filepath.Join(l.CredsDir(), PVComponent(pvName)+".passwd")
}

// PVFromStaging returns the PV name of a staging mount point, or ok=false. For a long PV name
// that is its PVComponent (the stem), which Layout maps back to the same paths; the full name is
// in the mount's source (PVFromFSName).
func (l Layout) PVFromStaging(path string) (string, bool) {
	dir, name := filepath.Split(path)
	if filepath.Clean(dir) != l.StagingRoot() || name == "" {
		return "", false
	}
	return name, true
}

// StagingPV returns the full name of the PV whose bridge staging mount m is, or ok=false when m
// is not at a staging path. A long PV name is hashed in the path but whole in the mount's source
// (our fsname, kept by a dead mount too); the stem is returned when the source does not name it.
func (l Layout) StagingPV(m stack.Mount) (string, bool) {
	stem, ok := l.PVFromStaging(m.MountPoint)
	if !ok {
		return "", false
	}
	if pv, ours := stack.PVFromFSName(m.Source); ours && PVComponent(pv) == stem {
		return pv, true
	}
	return stem, true
}

// TmpRoot holds s3fs's temporary files, one directory per PV, inside the state directory (not
// the agent container's small /tmp).
func (l Layout) TmpRoot() string { return filepath.Join(l.Root(), "tmp") }

// TmpDir is the s3fs tmpdir of one PV.
func (l Layout) TmpDir(pvName string) string { return filepath.Join(l.TmpRoot(), PVComponent(pvName)) }

// PlacedFile records the mounts we put at kubelet paths (stack.Placed); "handed" is the name
// earlier agents gave it.
func (l Layout) PlacedFile() string { return filepath.Join(l.Root(), "handed.json") }

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
