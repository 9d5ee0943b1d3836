package localdisk

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// LoopMajor is the block major number of loop devices.
const LoopMajor = 7

// ErrNotLoop is returned when a name or path does not designate a loop device.
var ErrNotLoop = errors.New("not a loop device")

// ParseLoopName returns N for "loopN" (a /sys/block entry). Partitions ("loop1p1") are not loops.
func ParseLoopName(name string) (int, error) {
	rest, ok := strings.CutPrefix(name, "loop")
	if !ok || rest == "" {
		return 0, fmt.Errorf("%q: %w", name, ErrNotLoop)
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return 0, fmt.Errorf("%q: %w", name, ErrNotLoop)
	}
	return n, nil
}

// LoopDevPath is the device node of loop minor n under devDir.
func LoopDevPath(devDir string, n int) string {
	return filepath.Join(devDir, "loop"+strconv.Itoa(n))
}

// ParseLoopLinkTarget returns N when target (a symlink's content) is exactly devDir/loopN — the only
// form the agent ever writes. Anything else is not the agent's link.
func ParseLoopLinkTarget(devDir, target string) (int, error) {
	dir, base := filepath.Split(target)
	if filepath.Clean(dir) != filepath.Clean(devDir) || filepath.Clean(target) != target {
		return 0, fmt.Errorf("link target %q: %w", target, ErrNotLoop)
	}
	return ParseLoopName(base)
}

// ParseBackingFile parses /sys/block/loopN/loop/backing_file. The kernel appends " (deleted)" when
// the file was unlinked while attached; the path is still what identifies the owner.
func ParseBackingFile(content string) (path string, deleted bool) {
	s := strings.TrimRight(content, "\n")
	if p, ok := strings.CutSuffix(s, " (deleted)"); ok {
		return p, true
	}
	return s, false
}

// InDir reports whether path lies strictly inside dir (both cleaned, absolute). It is lexical:
// callers pass paths they got from the kernel (backing files) or built themselves.
func InDir(dir, path string) bool {
	if !filepath.IsAbs(dir) || !filepath.IsAbs(path) {
		return false
	}
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	if err != nil {
		return false
	}
	return rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
}
