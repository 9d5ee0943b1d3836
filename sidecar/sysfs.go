package sidecar

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrBadSysfsSize: /sys/dev/block/MAJ:MIN/size did not hold a sector count.
var ErrBadSysfsSize = errors.New("sysfs size is not a sector count")

// SysfsSizePath is the sysfs file holding the size of block device major:minor.
func SysfsSizePath(sysDir string, major, minor uint32) string {
	return filepath.Join(sysDir, "dev", "block", fmt.Sprintf("%d:%d", major, minor), "size")
}

// ParseSysfsSize turns the content of a sysfs size file (512-byte sectors, whatever the
// device's logical block size) into bytes.
func ParseSysfsSize(content string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(content), 10, 64)
	if err != nil || n < 0 || n > (1<<63-1)/512 {
		return 0, fmt.Errorf("%q: %w", content, ErrBadSysfsSize)
	}
	return n * 512, nil
}
