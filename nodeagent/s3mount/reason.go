package s3mount

import (
	"errors"

	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csiclient"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/s3fs"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Reason is the Event reason detail for an error of the restorer.
func Reason(err error) string {
	var re *stack.ResultError
	if errors.As(err, &re) {
		return re.Reason
	}
	for _, r := range []struct {
		err    error
		reason string
	}{
		{csiclient.ErrSecretNotFound, "SecretNotFound"},
		{s3fs.ErrSecretKeyMissing, "SecretKeyMissing"},
		{s3fs.ErrNoSecretRef, "NoSecretRef"},
		{s3fs.ErrUnsafe, "UnsafeVolumeAttributes"},
		{s3fs.ErrNoBucket, "BadVolumeAttributes"},
		{s3fs.ErrUnsupported, "BadVolumeAttributes"},
		{s3fs.ErrBadOptions, "BadVolumeAttributes"},
		{s3fs.ErrS3fs, "S3fsFailed"},
		{s3fs.ErrCannotReproduce, "CannotReproduce"},
		{s3fs.ErrBridgeBusy, "BridgeBusy"},
		{csiclient.ErrNotAttached, "NotAttached"},
		{csiclient.ErrReplay, "ReplayFailed"},
		{csiclient.ErrDriverDown, "DriverDown"},
		{stack.ErrMount, "MountFailed"},
	} {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return "Error"
}
