package stack

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLdd(t *testing.T) {
	const out = `	linux-vdso.so.1 (0x00007ffd)
	libfuse.so.2 => /lib/x86_64-linux-gnu/libfuse.so.2 (0x00007f1)
	libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f2)
	libmissing.so => not found
	/lib64/ld-linux-x86-64.so.2 (0x00007f3)
`
	want := []string{"/lib/x86_64-linux-gnu/libfuse.so.2", "/lib/x86_64-linux-gnu/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}
	if diff := cmp.Diff(want, ParseLdd(out)); diff != "" {
		t.Errorf("ParseLdd (-want +got):\n%s", diff)
	}
}
