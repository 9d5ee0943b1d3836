package stack

import "github.com/pvrescue/pvrescue/internal/mountinfo"

// ErrMountInfo is wrapped by every mountinfo parse error.
var ErrMountInfo = mountinfo.ErrMalformed

// Mount is one line of /proc/self/mountinfo (internal/mountinfo's one parser).
type Mount = mountinfo.Mount

// ParseMountInfo parses the content of /proc/<pid>/mountinfo (see proc(5)).
func ParseMountInfo(content string) (Table, error) {
	mounts, err := mountinfo.Parse(content)
	if err != nil {
		return nil, err
	}
	return Table(mounts), nil
}

// Table answers questions about one snapshot of the mount table.
type Table []Mount

// Top returns the uppermost mount at mountPoint (the one no other mount there is stacked on).
func (t Table) Top(mountPoint string) (Mount, bool) {
	stack := t.Stack(mountPoint)
	if len(stack) == 0 {
		return Mount{}, false
	}
	return stack[len(stack)-1], true
}

// Stack returns the mounts at mountPoint from the bottom to the top, following parent IDs
// rather than line order.
func (t Table) Stack(mountPoint string) []Mount {
	return mountinfo.Stack(t, mountPoint, func(m Mount) mountinfo.Place {
		return mountinfo.Place{ID: m.ID, ParentID: m.ParentID, MountPoint: m.MountPoint}
	})
}

// IsMountPoint reports whether anything is mounted at path.
func (t Table) IsMountPoint(path string) bool {
	_, ok := t.Top(path)
	return ok
}

// ByID returns the mount with mount ID id.
func (t Table) ByID(id int) (Mount, bool) {
	for _, m := range t {
		if m.ID == id {
			return m, true
		}
	}
	return Mount{}, false
}
