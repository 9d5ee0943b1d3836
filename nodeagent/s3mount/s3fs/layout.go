package s3fs

import (
	"path/filepath"

	"github.com/pvrescue/pvrescue/internal/statename"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Layout is where the agent keeps its S3 state under its state directory: our s3fs mounts,
// their credentials, temporary files, logs and records.
type Layout struct{ StateDir string }

// Root is <stateDir>/s3.
func (l Layout) Root() string { return filepath.Join(l.StateDir, "s3") }

// MountRoot holds one bridge mount point per PV. The directory keeps the name "staging" that
// earlier agents gave it, so a restarted or upgraded agent adopts the bridges they left there;
// it is not a staging path in kubelet's sense (only kubelet's globalmount is called that).
func (l Layout) MountRoot() string { return filepath.Join(l.Root(), "staging") }

// PVComponent is the one path component every per-PV file, directory and cgroup of ours is named
// by: the PV name itself when short (names earlier agents used), else a bounded hashed form
// (statename), with room left for the longest suffix added to it (".passwd" plus a temporary
// file's "." and ".tmp"; a cgroup's "-<pid>"). A stem read back from a name maps to itself.
func PVComponent(pvName string) string {
	return statename.Component(pvName, "", len(".passwd")+len("..tmp"))
}

// MountPoint is where our s3fs mounts one PV; the bridge binds it onto its pods' targets.
func (l Layout) MountPoint(pvName string) string {
	return filepath.Join(l.MountRoot(), PVComponent(pvName))
}

// CredsDir is a small tmpfs holding passwd files, so credentials never reach the node's disk.
func (l Layout) CredsDir() string { return filepath.Join(l.Root(), "creds") }

// PasswdFile is the s3fs passwd_file of one PV.
func (l Layout) PasswdFile(pvName string) string {
	return filepath.Join(l.CredsDir(), PVComponent(pvName)+".passwd")
}

// PVFromMountPoint returns the PV name of a bridge's mount point, or ok=false. For a long PV name
// that is its PVComponent (the stem), which Layout maps back to the same paths; the full name is
// in the mount's source (PVFromFSName).
func (l Layout) PVFromMountPoint(path string) (string, bool) {
	dir, name := filepath.Split(path)
	if filepath.Clean(dir) != l.MountRoot() || name == "" {
		return "", false
	}
	return name, true
}

// MountPV returns the full name of the PV whose bridge mount m is, or ok=false when m is not at
// a bridge mount point. A long PV name is hashed in the path but whole in the mount's source
// (our fsname, kept by a dead mount too); the stem is returned when the source does not name it.
func (l Layout) MountPV(m stack.Mount) (string, bool) {
	stem, ok := l.PVFromMountPoint(m.MountPoint)
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

// BridgesDir holds one BridgeRecord per PV whose bridge runs.
func (l Layout) BridgesDir() string { return filepath.Join(l.Root(), "bridges") }

// BridgeRecordFile is the record of one PV's bridge.
func (l Layout) BridgeRecordFile(pvName string) string {
	return filepath.Join(l.BridgesDir(), PVComponent(pvName)+".json")
}

// LogDir holds s3fs's output, one file per PV, truncated at every start.
func (l Layout) LogDir() string { return filepath.Join(l.Root(), "log") }

// LogFile is the output file of one PV's s3fs.
func (l Layout) LogFile(pvName string) string {
	return filepath.Join(l.LogDir(), PVComponent(pvName)+".log")
}
