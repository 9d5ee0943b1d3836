//go:build !linux

package priority

import "errors"

// ErrUnsupported: nice values per thread are a Linux matter.
var ErrUnsupported = errors.New("setting the scheduling priority needs Linux")

// SetNice is Linux only.
func SetNice(int) error { return ErrUnsupported }

// Nice is Linux only.
func Nice(int) (int, error) { return 0, ErrUnsupported }
