package testenv

import (
	"os"

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

// parseMountInfo keeps the mount id, mount point and filesystem type of each line
// (mountinfo.ParseLenient); lines it cannot parse are skipped.
func parseMountInfo(s string) []Mount {
	var out []Mount
	for _, m := range mountinfo.ParseLenient(s) {
		out = append(out, Mount{ID: m.ID, MountPoint: m.MountPoint, FSType: m.FSType})
	}
	return out
}
