package stack

import (
	"errors"
	"fmt"
	"strings"
)

// ErrFUSEDev is returned for a device that cannot name a FUSE connection.
var ErrFUSEDev = errors.New("not a FUSE connection device")

// FUSEConnection returns the fusectl directory name of a FUSE mount's device "0:<minor>".
func FUSEConnection(dev string) (string, error) {
	maj, minor, ok := strings.Cut(dev, ":")
	if !ok || maj != "0" || minor == "" || strings.Trim(minor, "0123456789") != "" {
		return "", fmt.Errorf("%w: %q", ErrFUSEDev, dev)
	}
	return minor, nil
}
