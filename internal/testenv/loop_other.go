//go:build !linux

package testenv

import "errors"

var errNotLinux = errors.New("loop devices need Linux")

// AttachLoop needs Linux.
func AttachLoop(string, LoopRange) (*Loop, error) { return nil, errNotLinux }

// Detach needs Linux.
func (l *Loop) Detach() error { return errNotLinux }

// RemoveLoopNodes needs Linux.
func RemoveLoopNodes(LoopRange, func(int) bool) ([]string, error) { return nil, errNotLinux }

// FreshLoopDevices needs Linux.
func FreshLoopDevices() ([]string, error) { return nil, errNotLinux }
