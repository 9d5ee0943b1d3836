//go:build linux

package mountreplace

// SetBeforeDetach makes k call f between Detach's checks and its umount2 (a tenant's move
// between check and act).
func SetBeforeDetach(k *RealKernel, f func()) { k.beforeDetach = f }
