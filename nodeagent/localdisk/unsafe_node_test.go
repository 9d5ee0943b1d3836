//go:build node

package localdisk

import "unsafe"

func uintptrOf(p *uint64) uintptr { return uintptr(unsafe.Pointer(p)) }
