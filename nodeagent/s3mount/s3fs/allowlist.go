package s3fs

import (
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
)

// The allowlists below decide what of a volume's attributes and Secret may reach the s3fs
// command line. They are allowlists on purpose: a deny-list missed the comma that smuggles
// options into "-o url=...", and a bucket starting with "-" that s3fs reads as a flag.

var (
	bucketRe = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	ipv4Re   = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$`)
	regionRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	prefixRe = regexp.MustCompile(`^[A-Za-z0-9._~@+=-]+(/[A-Za-z0-9._~@+=-]+)*$`)
	decRe    = regexp.MustCompile(`^[0-9]{1,12}$`)
	octRe    = regexp.MustCompile(`^0?[0-7]{3}$`)
)

// optionFormats maps each s3fs option a volume may set to the format of its value: "" for a
// flag without value, else a regexp the whole value must match. Options that name files or
// programs (passwd_file, use_cache, tmpdir, ...) or that pvrescue sets itself are absent.
var optionFormats = map[string]*regexp.Regexp{
	"ro": nil, "allow_other": nil, "nosuid": nil, "nodev": nil, "noexec": nil,
	"enable_noobj_cache": nil, "nocopyapi": nil, "norenameapi": nil, "noxmlns": nil, "nomultipart": nil,
	"complement_stat": nil, "notsup_compat_dir": nil, "compat_dir": nil, "sigv2": nil, "sigv4": nil,
	"streamupload": nil, "enable_content_md5": nil, "listobjectsv2": nil,
	"uid": decRe, "gid": decRe, "umask": octRe, "mp_umask": octRe,
	"max_stat_cache_size": decRe, "stat_cache_expire": decRe, "stat_cache_interval_expire": decRe,
	"multireq_max": decRe, "parallel_count": decRe, "multipart_size": decRe, "multipart_copy_size": decRe,
	"singlepart_copy_limit": decRe, "max_dirty_data": decRe, "ensure_diskfree": decRe,
	"retries": decRe, "connect_timeout": decRe, "readwrite_timeout": decRe, "list_object_max_keys": decRe,
	"storage_class": regexp.MustCompile(`^(standard|standard_ia|onezone_ia|reduced_redundancy|intelligent_tiering|glacier|glacier_ir|deep_archive|cold|ice)$`),
	"default_acl":   regexp.MustCompile(`^(private|public-read|public-read-write|aws-exec-read|authenticated-read|bucket-owner-read|bucket-owner-full-control|log-delivery-write)$`),
	"dbglevel":      regexp.MustCompile(`^(crit|critical|err|error|warn|warning|info|information|dbg|debug)$`),
}

// CheckOption accepts one s3fs option ("key" or "key=value") only when its key is allowlisted
// and its value has the key's format.
func CheckOption(o string) error {
	key, val, hasVal := strings.Cut(o, "=")
	format, known := optionFormats[key]
	switch {
	case !known:
		return fmt.Errorf("%w: %w: s3fs option %q is not allowed", ErrBadOptions, ErrUnsafe, key)
	case format == nil && hasVal:
		return fmt.Errorf("%w: %w: s3fs option %q takes no value", ErrBadOptions, ErrUnsafe, key)
	case format != nil && !format.MatchString(val):
		return fmt.Errorf("%w: %w: s3fs option %q: value not of the allowed form", ErrBadOptions, ErrUnsafe, key)
	}
	return nil
}

// CheckBucket applies the S3 bucket naming rules: 3–63 characters of lowercase letters, digits,
// dots and hyphens, beginning and ending with a letter or digit, no "..", not an IPv4 address.
func CheckBucket(b string) error {
	if !bucketRe.MatchString(b) || strings.Contains(b, "..") || ipv4Re.MatchString(b) {
		return fmt.Errorf("%w: bucket %q breaks the S3 bucket naming rules", ErrUnsafe, b)
	}
	return nil
}

// CheckPrefix accepts an empty prefix or "/"-separated segments of safe characters, none of
// them "." or ".." or starting with "-".
func CheckPrefix(p string) error {
	if p == "" {
		return nil
	}
	if !prefixRe.MatchString(p) {
		return fmt.Errorf("%w: prefix %q has characters outside the allowed set", ErrUnsafe, p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." || strings.HasPrefix(seg, "-") {
			return fmt.Errorf("%w: prefix %q has a %q segment", ErrUnsafe, p, seg)
		}
	}
	return nil
}

// CheckEndpoint accepts an empty endpoint or an http(s) URL of host[:port] and an optional
// plain path: no credentials, query, fragment, comma or whitespace.
func CheckEndpoint(e string) error {
	if e == "" {
		return nil
	}
	bad := func(why string) error { return fmt.Errorf("%w: endpoint %s", ErrUnsafe, why) }
	if strings.ContainsAny(e, ", \t\r\n\\") {
		return bad("contains a comma, space or backslash")
	}
	u, err := url.Parse(e)
	if err != nil {
		return bad("is not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return bad("scheme must be http or https")
	case u.User != nil:
		return bad("must not carry credentials")
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || strings.Contains(e, "?") || strings.Contains(e, "#"):
		return bad("must not carry a query or fragment")
	case u.Hostname() == "":
		return bad("has no host")
	}
	host := u.Hostname()
	if net.ParseIP(host) == nil && !regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`).MatchString(host) {
		return bad("host is not a DNS name or IP address")
	}
	if p := u.Port(); p != "" && !decRe.MatchString(p) {
		return bad("port is not a number")
	}
	if u.Path != "" && u.Path != "/" && !prefixRe.MatchString(strings.Trim(u.Path, "/")) {
		return bad("path has characters outside the allowed set")
	}
	return nil
}

// CheckRegion accepts an empty region or lowercase letters, digits and hyphens.
func CheckRegion(r string) error {
	if r == "" || regionRe.MatchString(r) {
		return nil
	}
	return fmt.Errorf("%w: region %q is not of the form us-east-1", ErrUnsafe, r)
}
