//go:build linux

package stack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// FusectlDir is where the kernel's FUSE control filesystem is mounted.
const FusectlDir = "/sys/fs/fuse/connections"

// NewFUSEConnections returns the kernel's fusectl at FusectlDir.
func NewFUSEConnections() FUSEConnections { return fusectl{dir: FusectlDir} }

type fusectl struct{ dir string }

func (c fusectl) Abort(dev string) error {
	minor, err := FUSEConnection(dev)
	if err != nil {
		return err
	}
	conn := filepath.Join(c.dir, minor)
	if _, err := os.Stat(conn); errors.Is(err, fs.ErrNotExist) {
		// fusectl is not mounted in our mount namespace (containers often lack it).
		if merr := unix.Mount("fusectl", c.dir, "fusectl", 0, ""); merr != nil && !errors.Is(merr, unix.EBUSY) {
			return fmt.Errorf("%w: mount fusectl at %s: %w", ErrMount, c.dir, merr)
		}
	}
	if err := os.WriteFile(filepath.Join(conn, "abort"), []byte("1"), 0); err != nil {
		return fmt.Errorf("abort FUSE connection %s: %w", minor, err)
	}
	return nil
}
