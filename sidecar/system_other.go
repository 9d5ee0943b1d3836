//go:build !linux

package sidecar

import "syscall"

func blockDeviceSize(string) (int64, error) { return 0, ErrUnsupported }

func statfs(string) error { return ErrUnsupported }

func execve(string, []string, []string) error { return ErrUnsupported }

func errnoName(syscall.Errno) string { return "" }

func childProcAttr() *syscall.SysProcAttr { return nil }
