//go:build linux

package main

import (
	"slices"
	"testing"
)

func TestDiffKeepsOnlyWhatTheRuntimeMounted(t *testing.T) {
	start := parse(`20 1 0:30 / / rw,relatime - overlay overlay rw
21 20 0:31 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
22 21 0:31 /sys /proc/sys ro,nosuid,nodev,noexec,relatime - proc proc rw
23 21 0:5 /null /proc/kcore rw,nosuid - tmpfs tmpfs rw
24 20 8:1 /w /w rw,relatime - ext4 /dev/vda rw
25 24 0:60 / /w/x/sys ro,nosuid,nodev,relatime - fuse.s3fs s3fs rw
26 20 8:1 /w\040b /w\040b rw - ext4 /dev/vda rw
`)
	base := kept(start, "/w")
	if len(base) != 5 {
		t.Fatalf("kept %+v, want everything but /w and below", base)
	}
	now := parse(`20 1 0:30 / / rw,relatime - overlay overlay rw
21 20 0:31 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
23 21 0:5 /null /proc/kcore rw,nosuid,nodev - tmpfs tmpfs rw
24 20 8:1 /w /w rw,relatime - ext4 /dev/vda rw
27 24 0:61 / /w/x.link/sys ro,nosuid,nodev,relatime - fuse.s3fs s3fs rw
26 20 8:1 /w\040b /w\040b rw - ext4 /dev/vda rw
`)
	got := diff(base, kept(now, "/w"))
	want := []string{
		`LOST id=22 mountpoint="/proc/sys" options=ro,nosuid,nodev,noexec,relatime`,
		`CHANGED id=23 mountpoint="/proc/kcore" options=rw,nosuid,nodev was="/proc/kcore" rw,nosuid`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("diff = %q, want %q", got, want)
	}
}
