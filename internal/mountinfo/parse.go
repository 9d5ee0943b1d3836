package mountinfo

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ErrMalformed is wrapped by every mountinfo parse error.
var ErrMalformed = errors.New("malformed mountinfo line")

// Mount is one line of /proc/<pid>/mountinfo (proc(5)), escapes undone.
type Mount struct {
	ID       int
	ParentID int
	// Dev is "major:minor"; every bind of one filesystem (one FUSE connection) shares it.
	Dev string
	// Root is the directory of the filesystem this mount shows (a subPath bind shows "/sub").
	Root       string
	MountPoint string
	// Options are the per-mount options (ro/rw, nosuid, nodev, noexec, ...).
	Options []string
	// Optional are the propagation tags (shared:N, master:N, propagate_from:N, unbindable).
	Optional []string
	FSType   string
	Source   string
}

// HasOption reports whether the per-mount option o is set.
func (m Mount) HasOption(o string) bool { return slices.Contains(m.Options, o) }

// ReadOnly reports whether the mount itself is read-only.
func (m Mount) ReadOnly() bool { return m.HasOption("ro") }

// Place is the mount's place in the tree, for Stack.
func (m Mount) Place() Place { return Place{ID: m.ID, ParentID: m.ParentID, MountPoint: m.MountPoint} }

// Parse parses the whole content of a mountinfo file. Lines are separated by '\n' (the kernel
// escapes a newline inside a path); empty lines are skipped, and nothing else is trimmed.
func Parse(content string) ([]Mount, error) {
	var out []Mount
	for n, line := range strings.Split(content, "\n") {
		if line == "" {
			continue
		}
		m, err := ParseLine(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n+1, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// ParseLenient parses every line of content that parses and leaves out the others, for readers
// that only look (tests, cleanup of test hosts) and must not stop at one line they cannot read.
func ParseLenient(content string) []Mount {
	var out []Mount
	for _, line := range strings.Split(content, "\n") {
		if m, err := ParseLine(line); err == nil {
			out = append(out, m)
		}
	}
	return out
}

// ParseLine parses one mountinfo line exactly as the kernel writes it (fs/proc_namespace.c):
// fields separated by one space each, the optional fields ended by a lone "-". Only a single
// ' ' separates: a path may hold any other byte raw (\r, \v, \f, U+0085, U+00A0, invalid
// UTF-8), since the kernel escapes only space, tab, newline and backslash, so splitting on
// "white space" would let a directory name move the field boundaries.
func ParseLine(line string) (Mount, error) {
	m, _, err := ParseLineSuper(line)
	return m, err
}

// ParseLineSuper is ParseLine that also returns the last field, the filesystem's own (super
// block) options, as the kernel wrote them (each filesystem escapes its option values its own
// way, so they are not unescaped here).
func ParseLineSuper(line string) (Mount, string, error) {
	f := strings.Split(line, " ")
	// 6 fixed fields, optional fields, "-", fstype, source, super options.
	sep := -1
	for i := 6; i < len(f); i++ {
		if f[i] == "-" {
			sep = i
			break
		}
	}
	// Exactly three fields after the separator (type, source, the filesystem's own options):
	// none of them holds an unescaped space.
	if len(f) < 6 || sep < 0 || len(f) != sep+4 {
		return Mount{}, "", fmt.Errorf("%w: %q", ErrMalformed, line)
	}
	id, err1 := strconv.Atoi(f[0])
	parent, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || id < 0 || parent < 0 || !ValidDev(f[2]) {
		return Mount{}, "", fmt.Errorf("%w: %q", ErrMalformed, line)
	}
	for _, o := range f[6:sep] {
		if o == "" {
			return Mount{}, "", fmt.Errorf("%w: empty optional field: %q", ErrMalformed, line)
		}
	}
	if f[3] == "" || f[4] == "" || f[5] == "" || f[sep+1] == "" {
		return Mount{}, "", fmt.Errorf("%w: empty field: %q", ErrMalformed, line)
	}
	return Mount{
		ID:         id,
		ParentID:   parent,
		Dev:        f[2],
		Root:       Unescape(f[3]),
		MountPoint: Unescape(f[4]),
		Options:    strings.Split(f[5], ","),
		Optional:   append([]string(nil), f[6:sep]...),
		FSType:     Unescape(f[sep+1]),
		Source:     Unescape(f[sep+2]),
	}, f[sep+3], nil
}

// ValidDev accepts "major:minor" with decimal numbers.
func ValidDev(s string) bool {
	maj, minor, ok := strings.Cut(s, ":")
	if !ok {
		return false
	}
	_, err1 := strconv.ParseUint(maj, 10, 32)
	_, err2 := strconv.ParseUint(minor, 10, 32)
	return err1 == nil && err2 == nil
}
