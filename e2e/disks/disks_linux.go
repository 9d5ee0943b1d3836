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
		f.Close()
		return nil, err
	}
	f.Close()
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

// Plug (re)creates the link to the loop device.
func (d *Disk) Plug() error {
	_ = os.Remove(d.Link())
	return os.Symlink(d.Dev, d.Link())
}

// Remove unlinks, detaches and deletes the disk.
func (d *Disk) Remove() error {
	var errs []error
	errs = append(errs, d.Unplug())
	errs = append(errs, d.loop.Detach())
	errs = append(errs, os.Remove(d.Image))
	return errors.Join(errs...)
}
