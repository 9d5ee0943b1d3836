package fusewatch

import (
	"strconv"
	"strings"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// Connection is a FUSE connection: the minor number of its mounts' device ("0:<minor>" in
// mountinfo), which /sys/fs/fuse/connections and fdinfo name it by.
type Connection uint32

// Mount is one mount of a FUSE connection: its mountinfo ID and mount point.
type Mount struct {
	ID    int
	Point string
}

// Connections parses a mountinfo file into the FUSE connections mounted, each with its mounts.
// Lines it cannot parse are skipped: a tenant-made mount point must not blind the watcher to
// every other mount.
func Connections(content string) map[Connection][]Mount {
	out := map[Connection][]Mount{}
	for _, line := range strings.Split(content, "\n") {
		if line == "" {
			continue
		}
		m, err := mountinfo.ParseLine(line)
		if err != nil || !IsFUSE(m.FSType) {
			continue
		}
		_, minor, _ := strings.Cut(m.Dev, ":")
		n, err := strconv.ParseUint(minor, 10, 32)
		if err != nil {
			continue
		}
		out[Connection(n)] = append(out[Connection(n)], Mount{ID: m.ID, Point: m.MountPoint})
	}
	return out
}

// IsFUSE reports whether a mountinfo filesystem type is served by a FUSE daemon ("fuse",
// "fuse.<subtype>", "fuseblk"); "fusectl" is the control filesystem, not a connection.
func IsFUSE(fstype string) bool {
	return fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse.")
}

// FDInfoConnection reads the connection a /dev/fuse descriptor serves from its
// /proc/<pid>/fdinfo/<fd> text; ok is false when the kernel does not say (older kernels, or a
// descriptor opened but not mounted yet).
func FDInfoConnection(fdinfo string) (Connection, bool) {
	for _, line := range strings.Split(fdinfo, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "fuse_connection" {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
		if err != nil {
			return 0, false
		}
		return Connection(n), true
	}
	return 0, false
}

// FuseDevice is the link text of a descriptor of the FUSE device.
const FuseDevice = "/dev/fuse"

// FuseDeviceLink reports whether a /proc/<pid>/fd/<n> link text names the FUSE device: exactly
// /dev/fuse, nothing else. A tenant's own file named fuse anywhere else (or "/dev/fuse
// (deleted)") is not looked at further: the walk never stats what a descriptor points to, and
// reads fdinfo (where the kernel names the connection) only for these.
func FuseDeviceLink(target string) bool { return target == FuseDevice }
