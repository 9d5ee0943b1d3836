// Package mountinfo holds what every reader of /proc/<pid>/mountinfo in pvrescue needs the same
// way: the line parser (Parse, ParseLine: every field, escapes undone), the order of the mounts
// stacked at one mount point (Stack, generic over each reader's own line type), and Unescape.
// It is the repository's one mountinfo parser: the agent, the e2e module, hack/bench and
// internal/testenv all read mountinfo through it.
package mountinfo

import "strings"

// Unescape undoes the kernel's escaping of a mountinfo path: a backslash followed by exactly
// three octal digits is the byte they name (the kernel writes \040, \011, \012 and \134 for
// space, tab, newline and backslash). Every other byte, a malformed escape included, is kept as
// it is.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && s[i+1] <= '3' && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
