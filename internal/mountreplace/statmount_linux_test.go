//go:build linux

package mountreplace_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pvrescue/pvrescue/internal/mountreplace"
)

// statmountAnswer builds a struct statmount as the kernel writes it: the fixed part, then the
// string table; mntPointAt is the mount point's offset in the table.
func statmountAnswer(mask uint64, id, parent uint64, oldID uint32, table string, mntPointAt uint32) []byte {
	buf := make([]byte, mountreplace.StatmountFixed+len(table)+16)
	binary.NativeEndian.PutUint32(buf[0:], uint32(mountreplace.StatmountFixed+len(table)))
	binary.NativeEndian.PutUint64(buf[8:], mask)
	binary.NativeEndian.PutUint64(buf[40:], id)
	binary.NativeEndian.PutUint64(buf[48:], parent)
	binary.NativeEndian.PutUint32(buf[56:], oldID)
	binary.NativeEndian.PutUint32(buf[108:], mntPointAt)
	copy(buf[mountreplace.StatmountFixed:], table)
	return buf
}

func TestParseStatmount(t *testing.T) {
	const both = mountreplace.StatmountMntBasic | mountreplace.StatmountMntPoint
	good := statmountAnswer(both, 0x1_0000_0042, 0x1_0000_0007, 66, "/var/lib/kubelet/pods/u/v\x00", 0)
	binary.NativeEndian.PutUint32(good[60:], 24)                           // mnt_parent_id_old
	binary.NativeEndian.PutUint64(good[72:], unix.MS_SHARED|unix.MS_SLAVE) // mnt_propagation
	f, err := mountreplace.ParseStatmount(good, both)
	if err != nil {
		t.Fatal(err)
	}
	want := mountreplace.MountFacts{ID: 0x1_0000_0042, ParentID: 0x1_0000_0007, OldID: 66, OldParentID: 24,
		MountPoint: "/var/lib/kubelet/pods/u/v", Propagation: mountreplace.Propagation{Shared: true, Slave: true}}
	if f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
	// A mount point with a space is raw here (mountinfo escapes it as \040).
	spaced := statmountAnswer(both, 5, 1, 5, "opts\x00/a b\x00", 5)
	if f, err := mountreplace.ParseStatmount(spaced, both); err != nil || f.MountPoint != "/a b" {
		t.Errorf("mount point after another string: %+v, %v; want /a b", f, err)
	}

	for _, tc := range []struct {
		name    string
		buf     []byte
		wantErr string
	}{
		{"short buffer", good[:100], "at least 512"},
		{"mask without the mount point", statmountAnswer(mountreplace.StatmountMntBasic, 1, 1, 1, "/x\x00", 0), "lacks 0x10"},
		{"mount point past the answer", statmountAnswer(both, 1, 1, 1, "/x\x00", 40), "past the answer"},
		{"unterminated mount point", statmountAnswer(both, 1, 1, 1, "/x", 0), "not terminated"},
		{"size beyond the buffer", func() []byte {
			b := statmountAnswer(both, 1, 1, 1, "/x\x00", 0)
			binary.NativeEndian.PutUint32(b, uint32(len(b)+1))
			return b
		}(), "says"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := mountreplace.ParseStatmount(tc.buf, both)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parsed %+v, err %v; want an error containing %q", f, err, tc.wantErr)
			}
		})
	}
}
