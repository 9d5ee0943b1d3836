//go:build linux

package mountreplace

// SetBeforeDetach makes k call f between Detach's checks and its umount2 (a tenant's move
// between check and act).
func SetBeforeDetach(k *RealKernel, f func()) { k.beforeDetach = f }

// SetTableOnly makes k's Detach check by the mount table, as on kernels without statmount.
func SetTableOnly(k *RealKernel, on bool) { k.tableOnly = on }

// MountFacts is statmount's answer, for tests.
type MountFacts = mountFacts

// Statmount, UniqueID, ParseStatmount and StackBaseOf expose the statmount checks to tests.
var (
	Statmount      = statmount
	UniqueID       = uniqueID
	ParseStatmount = parseStatmount
	StackBaseOf    = stackBaseOf
)

// Statmount mask bits and the fixed size of its answer, for tests that build one.
const (
	StatmountMntBasic = statmountMntBasic
	StatmountMntPoint = statmountMntPoint
	StatmountFixed    = statmountFixed
)
