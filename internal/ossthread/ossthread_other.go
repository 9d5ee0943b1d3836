//go:build !linux

package ossthread

func run(f func()) { f() }

func enter(string, int, func() error) error { return ErrUnsupported }
