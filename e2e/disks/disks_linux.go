//go:build linux

// Package disks makes the "local disks" of the end-to-end suite: image files attached to loop
// devices at fixed minor numbers, linked from /dev/disk/by-id like real disks.
package disks

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// ByIDDir is where the disks are linked from, as udev does for real disks.
const ByIDDir = "/dev/disk/by-id"

// LinkPrefix starts the name of every link the suite makes (cluster teardown removes them all).
const LinkPrefix = cluster.DiskLinkPrefix

// Disk is one fake "real" disk.
type Disk struct {
	Name  string // link name under ByIDDir
	Image string
	Dev   string // /dev/loopN
	Size  int64
	loop  *testenv.Loop
}

// Link is the disk's stable path.
func (d *Disk) Link() string { return filepath.Join(ByIDDir, d.Name) }

// Make creates an image of size bytes in dir, attaches it to /dev/loop<minor> (the device and its
// node made where missing, as the agent does) and links it from /dev/disk/by-id/<LinkPrefix><name>.
func Make(dir, name string, minor int, size int64) (*Disk, error) {
	d := &Disk{Name: LinkPrefix + name, Image: filepath.Join(dir, name+".img"), Size: size}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(d.Image)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(size); err != nil {
		_ = f.Close() // the truncate error is the one to report
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	if d.loop, err = testenv.AttachLoop(d.Image, testenv.LoopRange{First: minor, Last: minor}); err != nil {
		return nil, err
	}
	d.Dev = d.loop.Dev
	if err := os.MkdirAll(ByIDDir, 0o755); err != nil {
		return nil, err
	}
	if err := d.Plug(); err != nil {
		return nil, err
	}
	return d, nil
}

// Unplug removes the link, as a reboot that loses the disk would.
func (d *Disk) Unplug() error {
	if err := os.Remove(d.Link()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Plug (re)creates the link to the loop device the way udev does: a link at a temporary name
// renamed over the path, so whatever stands there (the agent's fake link) is replaced at once and
// the path is never missing in between (the agent would fake it again).
func (d *Disk) Plug() error {
	tmp := d.Link() + ".udev-tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(d.Dev, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, d.Link()); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// Remove unlinks, detaches and deletes the disk.
func (d *Disk) Remove() error {
	var errs []error
	errs = append(errs, d.Unplug())
	errs = append(errs, d.loop.Detach())
	errs = append(errs, os.Remove(d.Image))
	return errors.Join(errs...)
}

// DiskGroup is the group udev gives disk nodes (Debian's "disk", gid 6): a non-root application
// reads its raw devices through a supplemental group, not as their owner.
const DiskGroup = 6

// ShareWithGroup makes the disk's loop node root:gid 0660, as udev's rule for disks does; the
// container runtime copies the host node's owner and mode into the pod.
func (d *Disk) ShareWithGroup(gid int) error {
	if err := os.Chown(d.Dev, 0, gid); err != nil {
		return err
	}
	return os.Chmod(d.Dev, 0o660) //nolint:gosec // udev's mode for disks: the group reads the raw device
}

// AdminLink is the admin's link for the disk in a discovery directory, as
// sig-storage-local-static-provisioner's setup has it: dir/<Name> → the disk's by-id link. It
// survives the disk's loss (then dangling) and is never changed by pvrescue.
func (d *Disk) AdminLink(dir string) string { return filepath.Join(dir, d.Name) }

// LinkInto makes d.AdminLink(dir), creating dir where missing.
func (d *Disk) LinkInto(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(d.AdminLink(dir))
	return os.Symlink(d.Link(), d.AdminLink(dir))
}

// RemoveAdminLinks removes the suite's links (LinkPrefix) from a discovery directory, and the
// directory when that leaves it empty.
func RemoveAdminLinks(dir string) error {
	links, _ := filepath.Glob(filepath.Join(dir, LinkPrefix+"*"))
	var errs []error
	for _, l := range links {
		if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	_ = os.Remove(dir) // only when empty
	return errors.Join(errs...)
}
