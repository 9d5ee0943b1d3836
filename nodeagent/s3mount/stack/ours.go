package stack

import "strings"

// FSName is the filesystem name given to our s3fs mounts. It shows as the source of the bridge's
// mount and of every bind made from it, even after its s3fs died, so the agent recognises its
// own binds from the mount table alone, across restarts.
func FSName(pvName string) string { return fsNamePrefix + pvName }

const fsNamePrefix = "pvrescue-s3:"

// PVFromFSName returns the PV of one of our mounts' source, or ok=false.
func PVFromFSName(source string) (string, bool) {
	if !strings.HasPrefix(source, fsNamePrefix) || len(source) == len(fsNamePrefix) {
		return "", false
	}
	return source[len(fsNamePrefix):], true
}

// IsFUSE reports whether fsType is a FUSE filesystem type ("fuse" or "fuse.<program>").
func IsFUSE(fsType string) bool { return fsType == "fuse" || strings.HasPrefix(fsType, "fuse.") }

// OurFUSETypes are the mount types of our own s3fs bridges: with our fsname= option s3fs
// mounts as plain "fuse" (seen on the node), some builds as "fuse.s3fs".
var OurFUSETypes = []string{"fuse", "fuse.s3fs"}
