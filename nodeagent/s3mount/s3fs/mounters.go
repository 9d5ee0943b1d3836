package s3fs

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/pvrescue/pvrescue/internal/config"
)

// The bridge's s3fs stands in for a dead geesefs or rclone mount over the same objects: each of
// the three stores one object per file under bucket/prefix. What the volume's options attribute
// says in the driver's program's flags is mapped here to s3fs -o options; a flag that would change
// what the application sees and has no s3fs equivalent leaves the volume unbridged
// (ErrCannotReproduce), a flag that only tunes caching or transfers is dropped.

// flagRule maps one flag of a program: drop (tuning only) or to an s3fs option whose value is
// the flag's (s3fs "" for a flag without value), value checked by format (nil: no value).
type flagRule struct {
	s3fs   string
	format *regexp.Regexp
	drop   bool
}

var anyValueRe = regexp.MustCompile(`^[A-Za-z0-9._:,+-]{1,64}$`)

func drop(format *regexp.Regexp) flagRule { return flagRule{drop: true, format: format} }

// geesefsFlags are the geesefs flags a volume's options may hold (k8s-csi-s3 passes them
// between its own --endpoint/--region/--setuid and bucket:prefix target).
var geesefsFlags = map[string]flagRule{
	"uid": {s3fs: "uid", format: decRe}, "gid": {s3fs: "gid", format: decRe},
	// Modes are mapped together (modeUmask): s3fs has one umask for files and directories.
	"dir-mode": {s3fs: "dir-mode", format: octRe}, "file-mode": {s3fs: "file-mode", format: octRe},
	// Tuning of memory, parallelism, caches and timeouts: not what the application sees.
	"memory-limit": drop(decRe), "max-flushers": drop(decRe), "max-parallel-parts": drop(decRe),
	"max-parallel-copy": drop(decRe), "part-sizes": drop(anyValueRe), "read-ahead": drop(decRe),
	"read-ahead-small": drop(decRe), "read-ahead-large": drop(decRe), "read-ahead-parallel": drop(decRe),
	"small-read-count": drop(decRe), "small-read-cutoff": drop(decRe), "large-read-cutoff": drop(decRe),
	"read-merge": drop(decRe), "single-part": drop(decRe), "max-merge-copy": drop(decRe),
	"stat-cache-ttl": drop(anyValueRe), "type-cache-ttl": drop(anyValueRe), "http-timeout": drop(anyValueRe),
	"retry-interval": drop(anyValueRe), "entry-limit": drop(decRe), "max-disk-cache-fd": drop(decRe),
	"list-type": drop(decRe), "no-checksum": drop(nil), "no-systemd": drop(nil), "debug": drop(nil),
	"debug_s3": drop(nil), "debug_fuse": drop(nil), "no-preload-metadata": drop(nil),
}

// rcloneFlags are the rclone mount flags a volume's options may hold (k8s-csi-s3 appends them
// to its `rclone mount :s3:bucket/prefix target --daemon …`).
var rcloneFlags = map[string]flagRule{
	"uid": {s3fs: "uid", format: decRe}, "gid": {s3fs: "gid", format: decRe},
	"umask": {s3fs: "umask", format: octRe}, "read-only": {s3fs: "ro"},
	// We always run with allow_other and path-style requests.
	"allow-other": drop(nil), "s3-force-path-style": drop(anyValueRe), "s3-provider": drop(anyValueRe),
	// Tuning of the VFS cache, transfers and logging.
	"vfs-cache-mode": drop(anyValueRe), "vfs-cache-max-age": drop(anyValueRe), "vfs-cache-max-size": drop(anyValueRe),
	"vfs-read-chunk-size": drop(anyValueRe), "vfs-write-back": drop(anyValueRe), "dir-cache-time": drop(anyValueRe),
	"attr-timeout": drop(anyValueRe), "poll-interval": drop(anyValueRe), "buffer-size": drop(anyValueRe),
	"s3-chunk-size": drop(anyValueRe), "s3-upload-cutoff": drop(anyValueRe), "s3-upload-concurrency": drop(decRe),
	"transfers": drop(decRe), "checkers": drop(decRe), "no-modtime": drop(nil), "no-checksum": drop(nil),
	"s3-no-check-bucket": drop(nil), "s3-no-head": drop(nil), "log-level": drop(anyValueRe), "v": drop(nil), "vv": drop(nil),
}

// defaultUmask is the s3fs umask a bridged geesefs or rclone volume gets when its options set no
// modes: both programs show directories 0755 and files 0644 by default; s3fs's umask applies to
// both alike, so files show 0755 (s3fs without a umask would show objects it did not write
// 0750/0640, root's: unreadable to other users).
const defaultUmask = "0022"

// MapOptions reads a volume's options attribute as program's flags (config.ProgramGeesefs,
// config.ProgramRclone; "s3fs" or "": ParseOptions) and returns the s3fs -o options that serve
// the same objects as the program would show them.
func MapOptions(program, s string) ([]string, error) {
	var rules map[string]flagRule
	switch program {
	case "", "s3fs":
		return ParseOptions(s)
	case config.ProgramGeesefs:
		rules = geesefsFlags
	case config.ProgramRclone:
		rules = rcloneFlags
	default:
		return nil, fmt.Errorf("%w: no options mapping for program %q", ErrCannotReproduce, program)
	}
	f := strings.Fields(s)
	var out []string
	modes := map[string]string{}
	for i := 0; i < len(f); i++ {
		tok := f[i]
		if strings.HasPrefix(tok, "-o") {
			// FUSE options (both programs accept -o): the s3fs allowlist decides.
			arg := tok
			if tok == "-o" {
				arg = strings.Join(f[i:min(i+2, len(f))], " ")
				i++
			}
			opts, err := ParseOptions(arg)
			if err != nil {
				return nil, err
			}
			out = append(out, opts...)
			continue
		}
		if !strings.HasPrefix(tok, "-") {
			return nil, fmt.Errorf("%w: %s option %q is not a flag", ErrBadOptions, program, tok)
		}
		key, val, hasVal := strings.Cut(strings.TrimLeft(tok, "-"), "=")
		rule, ok := rules[key]
		if !ok {
			return nil, fmt.Errorf("%w: %s flag --%s has no s3fs equivalent the bridge could use", ErrCannotReproduce, program, key)
		}
		if rule.format != nil && !hasVal {
			if i+1 >= len(f) {
				return nil, fmt.Errorf("%w: %s flag --%s lacks its value", ErrBadOptions, program, key)
			}
			i++
			val, hasVal = f[i], true
		}
		switch {
		case rule.format == nil && hasVal && (val != "true" || !rule.drop):
			return nil, fmt.Errorf("%w: %w: %s flag --%s takes no value", ErrBadOptions, ErrUnsafe, program, key)
		case rule.format != nil && !rule.format.MatchString(val):
			return nil, fmt.Errorf("%w: %w: %s flag --%s: value not of the allowed form", ErrBadOptions, ErrUnsafe, program, key)
		case rule.drop:
		case rule.s3fs == "dir-mode" || rule.s3fs == "file-mode":
			modes[rule.s3fs] = val
		case rule.format == nil:
			out = append(out, rule.s3fs)
		default:
			out = append(out, rule.s3fs+"="+val)
		}
	}
	umask, err := modeUmask(program, modes["dir-mode"], modes["file-mode"])
	if err != nil {
		return nil, err
	}
	// out passed the allowlist (ParseOptions, or rule formats that are the options' own); Args checks it again.
	if !slices.ContainsFunc(out, func(o string) bool { return o == "umask" || strings.HasPrefix(o, "umask=") }) {
		out = append(out, "umask="+umask)
	}
	return out, nil
}

// modeUmask is the s3fs umask for geesefs's --dir-mode/--file-mode (defaults 0755/0644): the
// directories' mode exactly; files then show the directories' bits, which must include the
// file mode's (s3fs cannot show files less than directories).
func modeUmask(program, dirMode, fileMode string) (string, error) {
	if dirMode == "" && fileMode == "" {
		return defaultUmask, nil
	}
	parse := func(s, def string) uint64 {
		if s == "" {
			s = def
		}
		v, _ := strconv.ParseUint(s, 8, 12) // octRe checked the form
		return v
	}
	d, f := parse(dirMode, "0755"), parse(fileMode, "0644")
	if f&^d != 0 {
		return "", fmt.Errorf("%w: %s --file-mode %04o grants what --dir-mode %04o does not; s3fs has one umask for both", ErrCannotReproduce, program, f, d)
	}
	return fmt.Sprintf("%04o", 0o777&^d), nil
}
