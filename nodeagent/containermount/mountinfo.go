package containermount

import (
	"path"
	"strings"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// ErrMountInfo is wrapped by every mountinfo parse error.
var ErrMountInfo = mountinfo.ErrMalformed

// Mount is one line of /proc/<pid>/mountinfo (proc(5)); the house's one parser is in
// internal/mountinfo.
type Mount = mountinfo.Mount

// ParseMountInfo parses the whole content of a mountinfo file.
func ParseMountInfo(content string) (MountTable, error) {
	ms, err := mountinfo.Parse(content)
	return MountTable(ms), err
}

// ParseMountInfoLine parses one mountinfo line.
func ParseMountInfoLine(line string) (Mount, error) { return mountinfo.ParseLine(line) }

// validDev accepts "major:minor" with decimal numbers.
func validDev(s string) bool { return mountinfo.ValidDev(s) }

// MountTable is one snapshot of a mount namespace's table.
type MountTable []Mount

// Stack returns the mounts at mountPoint from the bottom to the top, following parent IDs
// rather than line order (mountinfo.Stack).
func (t MountTable) Stack(mountPoint string) []Mount {
	return mountinfo.Stack(t, mountPoint, Mount.Place)
}

// Top returns the uppermost mount at mountPoint, the one a path lookup reaches.
func (t MountTable) Top(mountPoint string) (Mount, bool) {
	s := t.Stack(mountPoint)
	if len(s) == 0 {
		return Mount{}, false
	}
	return s[len(s)-1], true
}

// Reach returns the mount a lookup of path reaches: starting from the top of the root's stack,
// each component of path that is a mount point of the mount reached so far enters the mount
// stacked there (and the mounts stacked on it). A mount point hidden under a mount made later
// on one of its ancestors is not reached. The result is mounted at path itself only when
// its MountPoint equals path; otherwise path is a plain directory inside the returned mount.
func (t MountTable) Reach(p string) (Mount, bool) {
	cur, ok := t.Top("/")
	if !ok {
		return Mount{}, false
	}
	q := ""
	for _, c := range strings.Split(strings.Trim(path.Clean(p), "/"), "/") {
		if c == "" {
			continue
		}
		q += "/" + c
		for {
			next, ok := t.child(q, cur.ID)
			if !ok {
				break
			}
			cur = next
		}
	}
	return cur, true
}

// child returns the mount at mountPoint whose parent is parentID.
func (t MountTable) child(mountPoint string, parentID int) (Mount, bool) {
	for _, m := range t {
		if m.MountPoint == mountPoint && m.ParentID == parentID && m.ID != parentID {
			return m, true
		}
	}
	return Mount{}, false
}
