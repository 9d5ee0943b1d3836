package fusewatch

import (
	"context"
	"errors"
)

// Holder is a process holding /dev/fuse open.
type Holder struct {
	PID int
	// Connections are those its descriptors serve, as fdinfo names them.
	Connections []Connection
	// Unnamed is set when one of its /dev/fuse descriptors names no connection: on a kernel
	// that names them, a descriptor not mounted yet or a tenant's impostor (a plain file at
	// /dev/fuse in its own mount namespace); on an older kernel, any descriptor.
	Unnamed bool
}

// OS is what the Watcher needs of the system.
type OS interface {
	// Connections reads the mount table: the FUSE connections mounted, with their mounts.
	Connections() (map[Connection][]Mount, error)
	// Holders walks the processes for /dev/fuse descriptors.
	Holders() ([]Holder, error)
	// Events opens the event source: mount table changes and exits of added processes.
	Events() (Events, error)
}

// Events is one epoll-like set. Add and Remove may be called while Wait blocks.
type Events interface {
	// Add watches pid's exit; ErrExited when it is gone already.
	Add(pid int) error
	// Remove stops watching pid and returns false, unless pid has exited: then it stays watched
	// (Wait reports it, or already did) and Remove returns true. A walk racing an exit must not
	// swallow it.
	Remove(pid int) (exited bool)
	// Wait blocks until the mount table changed or watched processes exited, or ctx ended
	// (then ctx.Err()). An exited process is reported once and no longer watched.
	Wait(ctx context.Context) (Event, error)
	Close() error
}

// Event is what Wait saw.
type Event struct {
	MountsChanged bool
	Exited        []int
}

// ErrExited is returned by Events.Add for a process that is gone.
var ErrExited = errors.New("process exited")

// ErrUnsupported is returned by the OS on systems without pidfds.
var ErrUnsupported = errors.New("fusewatch: not supported on this system")
