package testenv

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"
)

// PickPort returns a TCP port that was free on host ("" means 127.0.0.1) a moment ago.
func PickPort(host string) (int, error) {
	if host == "" {
		host = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("free port %d: %w", port, err)
	}
	return port, nil
}

// FreePort is PickPort on 127.0.0.1 for a test; it fails the test when no port can be had.
func FreePort(t testing.TB) int {
	t.Helper()
	p, err := PickPort("")
	if err != nil {
		t.Fatalf("pick a free port: %v", err)
	}
	return p
}

// Addr joins host and port.
func Addr(host string, port int) string { return net.JoinHostPort(host, strconv.Itoa(port)) }

// Listening reports whether something accepts TCP connections at addr; the error says why not.
func Listening(ctx context.Context, addr string) (bool, error) {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	_ = c.Close() // the connection was only to see that something accepts
	return true, nil
}
