//go:build node

package localdisk_test

import (
	"unsafe"

	"k8s.io/apimachinery/pkg/api/resource"
)

func uintptrOf(p *uint64) uintptr { return uintptr(unsafe.Pointer(p)) }

func mustQty(s string) resource.Quantity { return resource.MustParse(s) }
