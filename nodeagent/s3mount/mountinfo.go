package s3mount

import "github.com/pvrescue/pvrescue/internal/mountinfo"

// ErrMountInfo is wrapped by every mountinfo parse error.
var ErrMountInfo = mountinfo.ErrMalformed

// MountInfo is one line of /proc/self/mountinfo (internal/mountinfo's one parser).
type MountInfo = mountinfo.Mount

// ParseMountInfo parses the content of /proc/<pid>/mountinfo (see proc(5)).
func ParseMountInfo(content string) (MountTable, error) {
	mounts, err := mountinfo.Parse(content)
	if err != nil {
		return nil, err
	}
	return MountTable(mounts), nil
}

// MountTable answers questions about one snapshot of the mount table.
type MountTable []MountInfo

// Top returns the uppermost mount at mountPoint (the one no other mount there is stacked on).
func (t MountTable) Top(mountPoint string) (MountInfo, bool) {
	stack := t.Stack(mountPoint)
	if len(stack) == 0 {
		return MountInfo{}, false
	}
	return stack[len(stack)-1], true
}

// Stack returns the mounts at mountPoint from the bottom to the top, following parent IDs
// rather than line order.
func (t MountTable) Stack(mountPoint string) []MountInfo {
	return mountinfo.Stack(t, mountPoint, func(m MountInfo) mountinfo.Place {
		return mountinfo.Place{ID: m.ID, ParentID: m.ParentID, MountPoint: m.MountPoint}
	})
}

// IsMountPoint reports whether anything is mounted at path.
func (t MountTable) IsMountPoint(path string) bool {
	_, ok := t.Top(path)
	return ok
}
