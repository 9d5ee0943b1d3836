package sidecar

import (
	"errors"
	"testing"
)

func TestParseSysfsSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{"1\n", 512, false},
		{"0\n", 0, false},
		{"2097152\n", 1 << 30, false},
		{"", 0, true},
		{"-1\n", 0, true},
		{"12 sectors", 0, true},
		{"99999999999999999999", 0, true},
	} {
		got, err := ParseSysfsSize(tc.in)
		if tc.err != (err != nil) || got != tc.want {
			t.Errorf("ParseSysfsSize(%q) = %d, %v", tc.in, got, err)
		}
		if tc.err && !errors.Is(err, ErrBadSysfsSize) {
			t.Errorf("ParseSysfsSize(%q): error %v is not ErrBadSysfsSize", tc.in, err)
		}
	}
	if p := SysfsSizePath("/sys", 7, 101); p != "/sys/dev/block/7:101/size" {
		t.Errorf("SysfsSizePath = %q", p)
	}
}
