// Package statename turns names that come from the Kubernetes API (PV names up to 253
// characters, pod UIDs) into single path components for the agent's state files, directories and
// cgroups: always one component (no '/', no NUL, never "." or ".." or hidden), always within
// NAME_MAX together with the suffixes the caller adds. A short name made of the characters an
// API object name may hold is used as it is, so files written before this package existed keep
// their names; anything else is cut and given a hash of the whole name.
package statename

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// NameMax is the longest file name (one component, in bytes) Linux filesystems accept.
const NameMax = 255

// hashLen is the number of hex digits of sha256 kept in a hashed name (64 bits).
const hashLen = 16

// sep separates the kept prefix from the hash. No API object name holds it, so a hashed name never
// equals the plain name of another object.
const sep = "~"

// Component returns the component for name such that component+suffix, plus reserve more bytes
// the caller may add around it (a temporary file's "." and ".tmp", a "-<pid>"), fits in NameMax.
// suffix is appended to the result.
func Component(name, suffix string, reserve int) string {
	limit := NameMax - len(suffix) - reserve
	if plain(name) && len(name) <= limit {
		return name + suffix
	}
	return Hashed(name, limit) + suffix
}

// Hashed returns the hashed form of name within limit bytes: a sanitized prefix of name, "~" and
// 16 hex digits of its sha256. Hashed of a Hashed result within the same limit is itself (plain
// and short enough), so a stem read back from a file name maps to the same file.
func Hashed(name string, limit int) string {
	sum := sha256.Sum256([]byte(name))
	h := sep + hex.EncodeToString(sum[:])[:hashLen]
	keep := max(limit-len(h), 0)
	var b strings.Builder
	for i := 0; i < len(name) && b.Len() < keep; i++ {
		if c := name[i]; allowed(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('_')
		}
	}
	prefix := b.String()
	if prefix == "" || prefix[0] == '.' {
		prefix = "x" + strings.TrimLeft(prefix, ".")
		if len(prefix) > keep && keep > 0 {
			prefix = prefix[:keep]
		}
	}
	return prefix + h
}

// plain reports whether name can be a file name as it is: non-empty, of the characters API names
// hold (letters, digits, '-', '.', '_') and '~' (a hashed name), not starting with '.'.
func plain(name string) bool {
	if name == "" || name[0] == '.' {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !allowed(name[i]) && name[i] != '~' {
			return false
		}
	}
	return true
}

func allowed(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_'
}
