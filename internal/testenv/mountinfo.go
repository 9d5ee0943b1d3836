package testenv

import (
	"os"
	"strconv"
	"strings"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// Mount is one line of /proc/self/mountinfo, as much of it as the tests need.
type Mount struct {
	ID         int
	MountPoint string
	FSType     string
}

// Mounts reads /proc/self/mountinfo.
func Mounts() ([]Mount, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	return parseMountInfo(string(b)), nil
}

// parseMountInfo keeps the mount id, mount point (octal escapes undone) and filesystem type.
func parseMountInfo(s string) []Mount {
	var out []Mount
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		m := Mount{ID: id, MountPoint: mountinfo.Unescape(f[4])}
		for i, x := range f {
			if x == "-" && i+1 < len(f) {
				m.FSType = f[i+1]
				break
			}
		}
		out = append(out, m)
	}
	return out
}
