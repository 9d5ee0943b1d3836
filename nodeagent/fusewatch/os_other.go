//go:build !linux

package fusewatch

// NewOS returns the system's OS; on this platform every call fails with ErrUnsupported.
func NewOS(OSOptions) OS { return unsupportedOS{} }

type unsupportedOS struct{}

func (unsupportedOS) Connections() (map[Connection][]Mount, error) { return nil, ErrUnsupported }
func (unsupportedOS) Holders() ([]Holder, error)                   { return nil, ErrUnsupported }
func (unsupportedOS) Events() (Events, error)                      { return nil, ErrUnsupported }
