// Package ossthread runs work that changes a thread's namespaces (setns, unshare) on an OS thread
// of its own that is never the process's main thread, and retires that thread afterwards.
//
// A goroutine locked with runtime.LockOSThread that ends without unlocking takes its thread with
// it, and with the thread whatever namespace it joined. The main thread is the exception: the Go
// runtime never ends it, so a namespace it joined would stay, and /proc/self (which follows the
// main thread) would then describe that namespace to the whole agent. A thread that joined
// another namespace is never unlocked either: unlocking would hand it back to the scheduler still
// inside that namespace.
package ossthread

import "errors"

// ErrUnsupported is returned where threads cannot enter namespaces (not Linux).
var ErrUnsupported = errors.New("namespaces of a thread are only supported on Linux")

// Run runs f on a locked OS thread that is not the main thread, waits for it, and lets the runtime
// retire the thread when f returns. f may change the thread's namespaces freely.
func Run(f func()) { run(f) }

// Enter runs f on such a thread after joining the namespace at nsPath (a /proc/<pid>/ns/<type>
// file or a bind of one) with setns(2) of type nstype (unix.CLONE_NEWNET, CLONE_NEWCGROUP, ...).
func Enter(nsPath string, nstype int, f func() error) error { return enter(nsPath, nstype, f) }
