// Package mountinfo holds what every reader of /proc/<pid>/mountinfo in pvrescue needs the same
// way: the line parser (Parse, ParseLine: every field, escapes undone), the order of the mounts
// stacked at one mount point (Stack, generic over each reader's own line type), and Unescape.
// containermount and testenv parse with it; s3mount and the e2e cluster still keep parsers of
// their own.
package mountinfo

import (
	"strconv"
	"strings"
)

// Unescape undoes the kernel's \ooo escaping of space, tab, newline and backslash in a
// mountinfo field; anything else, a malformed escape included, is kept as it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
