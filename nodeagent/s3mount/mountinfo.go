package s3mount

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// ErrMountInfo is wrapped by every mountinfo parse error.
var ErrMountInfo = errors.New("malformed mountinfo line")

// MountInfo is one line of /proc/self/mountinfo, reduced to what the restorer needs.
type MountInfo struct {
	ID       int
	ParentID int
	// Dev is "major:minor" of the filesystem; binds of one FUSE connection share it.
	Dev        string
	Root       string
	MountPoint string
	// Options are the per-mount options (ro/rw, nosuid, ...).
	Options []string
	FSType  string
	Source  string
}

// ReadOnly reports whether the mount itself is read-only.
func (m MountInfo) ReadOnly() bool {
	for _, o := range m.Options {
		if o == "ro" {
			return true
		}
	}
	return false
}

// ParseMountInfo parses the content of /proc/<pid>/mountinfo (see proc(5)).
func ParseMountInfo(content string) (MountTable, error) {
	var out MountTable
	for n, line := range strings.Split(content, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		m, err := parseMountInfoLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		out = append(out, m)
	}
	return out, nil
}

func parseMountInfoLine(line string) (MountInfo, error) {
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
		return MountInfo{}, fmt.Errorf("%w: %q", ErrMountInfo, line)
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || !strings.Contains(f[2], ":") {
		return MountInfo{}, fmt.Errorf("%w: %q", ErrMountInfo, line)
	}
	return MountInfo{
		ID:         id,
		ParentID:   parent,
		Dev:        f[2],
		Root:       mountinfo.Unescape(f[3]),
		MountPoint: mountinfo.Unescape(f[4]),
		Options:    strings.Split(f[5], ","),
		FSType:     f[sep+1],
		Source:     mountinfo.Unescape(f[sep+2]),
	}, nil
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
