package containermount

import (
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// ErrMountInfo is wrapped by every mountinfo parse error.
var ErrMountInfo = errors.New("malformed mountinfo line")

// Mount is one line of /proc/<pid>/mountinfo (proc(5)).
type Mount struct {
	ID       int
	ParentID int
	// Dev is "major:minor"; every bind of one FUSE connection shares it.
	Dev string
	// Root is the directory of the filesystem this mount shows (a subPath bind shows "/sub").
	Root       string
	MountPoint string
	// Options are the per-mount options (ro/rw, nosuid, nodev, noexec, ...).
	Options []string
	// Optional are the propagation tags (shared:N, master:N, propagate_from:N, unbindable).
	Optional []string
	FSType   string
	Source   string
}

// HasOption reports whether the per-mount option o is set.
func (m Mount) HasOption(o string) bool {
	for _, x := range m.Options {
		if x == o {
			return true
		}
	}
	return false
}

// ReadOnly reports whether the mount itself is read-only.
func (m Mount) ReadOnly() bool { return m.HasOption("ro") }

// ParseMountInfo parses the whole content of a mountinfo file.
func ParseMountInfo(content string) (MountTable, error) {
	var out MountTable
	for n, line := range strings.Split(content, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := ParseMountInfoLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// ParseMountInfoLine parses one mountinfo line.
func ParseMountInfoLine(line string) (Mount, error) {
	f := strings.Fields(line)
	// 6 fixed fields, optional fields, "-", fstype, source, super options.
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	if len(f) < 6 || sep < 0 || len(f) < sep+3 {
		return Mount{}, fmt.Errorf("%w: %q", ErrMountInfo, line)
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || !validDev(f[2]) {
		return Mount{}, fmt.Errorf("%w: %q", ErrMountInfo, line)
	}
	return Mount{
		ID:         id,
		ParentID:   parent,
		Dev:        f[2],
		Root:       mountinfo.Unescape(f[3]),
		MountPoint: mountinfo.Unescape(f[4]),
		Options:    strings.Split(f[5], ","),
		Optional:   append([]string(nil), f[6:sep]...),
		FSType:     f[sep+1],
		Source:     mountinfo.Unescape(f[sep+2]),
	}, nil
}

// validDev accepts "major:minor" with decimal numbers.
func validDev(s string) bool {
	maj, minor, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(maj, 10, 32)
	_, err2 := strconv.ParseUint(minor, 10, 32)
	return err1 == nil && err2 == nil
}

// MountTable is one snapshot of a mount namespace's table.
type MountTable []Mount

// Stack returns the mounts at mountPoint from the bottom to the top, following parent IDs
// rather than line order (mountinfo.Stack).
func (t MountTable) Stack(mountPoint string) []Mount {
	return mountinfo.Stack(t, mountPoint, func(m Mount) mountinfo.Place {
		return mountinfo.Place{ID: m.ID, ParentID: m.ParentID, MountPoint: m.MountPoint}
	})
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
