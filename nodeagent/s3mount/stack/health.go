package stack

import (
	"errors"
	"syscall"
)

// ErrTimeout is returned by a Statfs that did not answer in time (a hung FUSE daemon).
var ErrTimeout = errors.New("statfs timed out")

// deadErrnos are the answers of a mount whose filesystem is gone: a killed FUSE daemon gives
// ENOTCONN, an aborted FUSE connection ECONNABORTED, a broken connection EIO, network
// filesystems ESTALE/EHOSTDOWN, a vanished device ENODEV.
var deadErrnos = []error{syscall.ENOTCONN, syscall.ECONNABORTED, syscall.EIO, syscall.ESTALE, syscall.ENODEV, syscall.EHOSTDOWN}

// IsDead reports whether a statfs error means the mount's filesystem is gone. Other errors
// (ENOENT, EACCES, ...) say nothing about the filesystem and are not treated as dead, nor is a
// timeout, however long: a hung but live daemon must not get a second writer (hung.go).
func IsDead(err error) bool {
	if err == nil {
		return false
	}
	for _, e := range deadErrnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Health is the state of one mount point.
type Health int

const (
	// NotMounted: nothing is mounted there (kubelet has not published it, or tore it down).
	NotMounted Health = iota
	// Healthy: the top mount answers.
	Healthy
	// Dead: the top mount is a filesystem that is gone.
	Dead
	// Unknown: statfs failed for a reason that does not say the filesystem is gone.
	Unknown
	// Hung: statfs timed out; the daemon holds the connection but does not answer.
	Hung
)

func (h Health) String() string {
	switch h {
	case NotMounted:
		return "not-mounted"
	case Healthy:
		return "healthy"
	case Dead:
		return "dead"
	case Hung:
		return "hung"
	default:
		return "unknown"
	}
}

// Classify combines the mount table and a statfs answer into a Health.
func Classify(mounted bool, statfsErr error) Health {
	switch {
	case !mounted:
		return NotMounted
	case statfsErr == nil:
		return Healthy
	case IsDead(statfsErr):
		return Dead
	case errors.Is(statfsErr, ErrTimeout):
		return Hung
	default:
		return Unknown
	}
}
