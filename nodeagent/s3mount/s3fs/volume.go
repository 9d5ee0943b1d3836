package s3fs

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Sentinel errors for bad input; each maps to an Event reason (s3mount.Reason).
var (
	ErrNotS3            = errors.New("not an S3 CSI volume")
	ErrNoBucket         = errors.New("no bucket in the volume handle or attributes")
	ErrUnsupported      = errors.New("volume attributes ask for something s3fs cannot do")
	ErrBadOptions       = errors.New("unsupported mount options")
	ErrNoSecretRef      = errors.New("no credentials secret referenced by the PV")
	ErrUnsafe           = errors.New("value refused by the allowlist")
	ErrSecretKeyMissing = errors.New("credentials secret lacks a required key")
	ErrS3fs             = errors.New("s3fs did not mount")
	ErrCannotReproduce  = errors.New("the dead mount cannot be reproduced by our s3fs")
)

// Volume is everything needed to mount one S3 PV, without credentials.
type Volume struct {
	PV       string
	Driver   string
	Handle   string
	Bucket   string
	Prefix   string
	Endpoint string
	Region   string
	// Mounter is the value of the volume's mounter attribute (or the driver's default): the
	// FUSE program the driver runs, which the bridge's s3fs stands in for.
	Mounter string
	// Options are extra s3fs -o options from the volume attributes (a geesefs or rclone
	// volume's flags mapped to s3fs's: MapOptions).
	Options []string
	// ReadOnly is the PV's own read-only flag (spec.csi.readOnly or an "ro" mount option).
	ReadOnly  bool
	SecretRef *corev1.SecretReference
}

// ResolveVolume reads bucket, prefix, endpoint, region and options from the PV's volume
// attributes — exactly the volume context kubelet hands the node plugin, nothing from the
// StorageClass — and the credentials reference from the PV (CredentialsRef). It is pure, and
// refuses any value that does not pass the allowlists (bucket naming rules, endpoint and region
// formats, s3fs options): such a value could smuggle options into the s3fs command line.
//
// prof is the driver's layout (config.S3.Profile): which attributes hold bucket and prefix, the
// subdirectory it adds, and which FUSE program it runs.
func ResolveVolume(pv *corev1.PersistentVolume, p config.S3Parameters, prof config.S3Profile) (Volume, error) {
	if pv == nil || pv.Spec.CSI == nil {
		return Volume{}, ErrNotS3
	}
	csi := pv.Spec.CSI
	get := func(key string) string {
		if key == "" {
			return ""
		}
		return csi.VolumeAttributes[key]
	}
	v := Volume{
		PV:       pv.Name,
		Driver:   csi.Driver,
		Handle:   csi.VolumeHandle,
		Endpoint: get(p.Endpoint),
		Region:   get(p.Region),
		ReadOnly: csi.ReadOnly || slices.Contains(pv.Spec.MountOptions, "ro"),
	}
	// The PV's own attributes (read live by the caller) say which program the driver runs; the
	// profile says whether our s3fs may stand in for it.
	m, mounter, known := prof.Mounter(csi.VolumeAttributes)
	switch {
	case !known && get(prof.MounterAttribute) == "":
		return Volume{}, fmt.Errorf("%w: %s has no %q attribute and the driver's default (%s) is not one the profile bridges", ErrCannotReproduce,
			pv.Name, prof.MounterAttribute, cmp.Or(prof.DefaultMounter, "unknown"))
	case !known:
		return Volume{}, fmt.Errorf("%w: mounter %q of %s is not in the driver's profile (s3fsMounters %v, mounters %v)", ErrCannotReproduce,
			m, pv.Name, prof.S3fsMounters, slices.Sorted(maps.Keys(prof.Mounters)))
	case mounter.Bridge != config.BridgeS3fs:
		return Volume{}, fmt.Errorf("%w: mounter %q of %s (%s): the profile bridges it with %q", ErrCannotReproduce,
			m, pv.Name, mounter.FUSEType, mounter.Bridge)
	}
	v.Mounter = m
	// Common s3fs drivers use "bucket/prefix" or "bucket" as the volume handle.
	hBucket, hPrefix, _ := strings.Cut(csi.VolumeHandle, "/")
	v.Bucket, v.Prefix = get(cmp.Or(prof.BucketAttribute, p.Bucket)), get(cmp.Or(prof.PrefixAttribute, p.Prefix))
	v.Bucket = cmp.Or(v.Bucket, hBucket)
	if v.Prefix == "" && v.Bucket == hBucket {
		v.Prefix = hPrefix
	}
	v.Prefix = strings.Trim(v.Prefix, "/")
	if prof.Subdir != "" && (prof.UsePrefixAttribute == "" || get(prof.UsePrefixAttribute) != "true") {
		v.Prefix = strings.Trim(v.Prefix+"/"+prof.Subdir, "/")
	}
	if v.Bucket == "" {
		return Volume{}, fmt.Errorf("%w: handle %q", ErrNoBucket, csi.VolumeHandle)
	}
	for _, err := range []error{CheckBucket(v.Bucket), CheckPrefix(v.Prefix), CheckEndpoint(v.Endpoint), CheckRegion(v.Region)} {
		if err != nil {
			return Volume{}, err
		}
	}
	var err error
	if v.Options, err = MapOptions(mounter.Program, get(p.MountOptions)); err != nil {
		return Volume{}, fmt.Errorf("mounter %q of %s: %w", m, pv.Name, err)
	}
	if v.SecretRef, err = CredentialsRef(pv); err != nil {
		return Volume{}, err
	}
	return v, nil
}

// CredentialsRef picks the secret kubelet hands the driver for the call that starts its FUSE
// program: the PV's nodeStageSecretRef (a staging driver mounts at NodeStageVolume with those),
// else its nodePublishSecretRef (a driver without staging mounts at NodePublishVolume). Nothing
// else: no StorageClass templates, no provisioner secret — kubelet would never pass those. A PV
// with neither is reported (ErrNoSecretRef).
func CredentialsRef(pv *corev1.PersistentVolume) (*corev1.SecretReference, error) {
	if pv == nil || pv.Spec.CSI == nil {
		return nil, ErrNotS3
	}
	for _, r := range []*corev1.SecretReference{pv.Spec.CSI.NodeStageSecretRef, pv.Spec.CSI.NodePublishSecretRef} {
		if r == nil || r.Name == "" {
			continue
		}
		if r.Namespace == "" {
			return nil, fmt.Errorf("%w: PV %s names secret %q without a namespace", ErrNoSecretRef, pv.Name, r.Name)
		}
		return r.DeepCopy(), nil
	}
	return nil, fmt.Errorf("%w: PV %s has neither nodeStageSecretRef nor nodePublishSecretRef", ErrNoSecretRef, pv.Name)
}

// ParseOptions reads a mount-options string of the form "-o a,b -o c=d" (or "-oa") into the
// list of s3fs -o options. Every option must pass the allowlist (CheckOption); anything else is
// rejected rather than passed to s3fs.
func ParseOptions(s string) ([]string, error) {
	f := strings.Fields(s)
	var out []string
	for i := 0; i < len(f); i++ {
		var val string
		switch {
		case f[i] == "-o" && i+1 < len(f):
			val = f[i+1]
			i++
		case strings.HasPrefix(f[i], "-o") && len(f[i]) > 2:
			val = f[i][2:]
		default:
			return nil, fmt.Errorf("%w: %q (only -o options are understood)", ErrBadOptions, f[i])
		}
		for _, o := range strings.Split(val, ",") {
			if o == "" {
				continue
			}
			if err := CheckOption(o); err != nil {
				return nil, err
			}
			out = append(out, o)
		}
	}
	return out, nil
}

// Credentials of one volume. String never prints the secret parts.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
	Endpoint        string
	Region          string
}

func (c Credentials) String() string { return "Credentials{<redacted>}" }

// GoString keeps %#v from printing secrets too.
func (c Credentials) GoString() string { return c.String() }

// ParseCredentials reads the configured keys of a secret. Error messages name keys, never values.
func ParseCredentials(s *corev1.Secret, keys config.SecretKeys) (Credentials, error) {
	get := func(k string) string {
		if k == "" {
			return ""
		}
		return strings.TrimSpace(string(s.Data[k]))
	}
	c := Credentials{
		AccessKeyID:     get(keys.AccessKeyID),
		SecretAccessKey: get(keys.SecretAccessKey),
		Endpoint:        get(keys.Endpoint),
		Region:          get(keys.Region),
	}
	var missing []string
	if c.AccessKeyID == "" {
		missing = append(missing, keys.AccessKeyID)
	}
	if c.SecretAccessKey == "" {
		missing = append(missing, keys.SecretAccessKey)
	}
	if len(missing) > 0 {
		return Credentials{}, fmt.Errorf("%w: secret %s/%s has no non-empty %s", ErrSecretKeyMissing, s.Namespace, s.Name, strings.Join(missing, ", "))
	}
	if strings.ContainsAny(c.AccessKeyID, ":\n") || strings.Contains(c.SecretAccessKey, "\n") {
		return Credentials{}, fmt.Errorf("%w: secret %s/%s: %s or %s has characters a passwd file cannot hold", ErrSecretKeyMissing, s.Namespace, s.Name, keys.AccessKeyID, keys.SecretAccessKey)
	}
	return c, nil
}

// PasswdContent is the s3fs passwd_file line.
func PasswdContent(c Credentials) []byte {
	return []byte(c.AccessKeyID + ":" + c.SecretAccessKey + "\n")
}

// Args builds the s3fs command line (without the program). s3fs runs in the foreground (-f)
// so the agent owns and supervises it; nosuid and nodev are always set, and its temporary files
// go to tmpDir, of whose filesystem it leaves diskFreeMB free (ensure_diskfree); a read-only
// volume (the PV's own flag) gets -o ro. The secret's endpoint and region override the
// volume's, and pass the same allowlists; a refused value starts nothing.
func Args(v Volume, c Credentials, mountPoint, passwdFile, tmpDir string, diskFreeMB int64) ([]string, error) {
	for _, err := range []error{CheckBucket(v.Bucket), CheckPrefix(v.Prefix)} {
		if err != nil {
			return nil, err
		}
	}
	source := v.Bucket
	if v.Prefix != "" {
		source += ":/" + v.Prefix
	}
	endpoint, region := cmp.Or(c.Endpoint, v.Endpoint), cmp.Or(c.Region, v.Region)
	for _, err := range []error{CheckEndpoint(endpoint), CheckRegion(region)} {
		if err != nil {
			return nil, fmt.Errorf("%w (secret or volume attribute)", err)
		}
	}
	args := []string{source, mountPoint, "-f",
		"-o", "passwd_file=" + passwdFile,
		"-o", "fsname=" + stack.FSName(v.PV),
		"-o", "use_path_request_style",
		// Containers run as any user; csi-s3 style drivers mount with allow_other too.
		"-o", "allow_other",
		"-o", "nosuid",
		"-o", "nodev",
		"-o", "tmpdir=" + tmpDir,
	}
	if v.ReadOnly {
		// Read-only kept by the daemon we own, not only by the mount flag of the binds.
		args = append(args, "-o", "ro")
	}
	if endpoint != "" {
		args = append(args, "-o", "url="+endpoint)
	}
	if region != "" {
		args = append(args, "-o", "endpoint="+region)
	}
	floor := max(diskFreeMB, 1)
	for _, o := range v.Options {
		if err := CheckOption(o); err != nil {
			return nil, err
		}
		if o == "ro" && v.ReadOnly {
			continue // given above
		}
		if val, ok := strings.CutPrefix(o, "ensure_diskfree="); ok {
			// A volume may ask for more free space, never for less than the node's floor.
			if n, err := strconv.ParseInt(val, 10, 64); err == nil {
				floor = max(floor, n)
			}
			continue
		}
		args = append(args, "-o", o)
	}
	// Last, so no earlier option can override it (s3fs takes the last value of an option).
	return append(args, "-o", "ensure_diskfree="+strconv.FormatInt(floor, 10)), nil
}

// s3fs's defaults for the options that size its start-up check (see startNeedMB).
const (
	defaultMultipartSizeMB = 10
	defaultParallelCount   = 5
	// startMarginMB is kept free above s3fs's start-up need when the floor is lowered, for what
	// the node writes between our look and s3fs's.
	startMarginMB = 16
)

// startNeedMB is the space s3fs must see free above its floor (ensure_diskfree) to start at all:
// one multipart buffer per parallel request (multipart_size MB × parallel_count), with the
// volume's options or s3fs's defaults.
func startNeedMB(options []string) int64 {
	size, count := int64(defaultMultipartSizeMB), int64(defaultParallelCount)
	for _, o := range options {
		key, val, _ := strings.Cut(o, "=")
		n, err := strconv.ParseInt(val, 10, 64)
		switch {
		case err != nil || n < 1:
		case key == "multipart_size":
			size = n
		case key == "parallel_count":
			count = n
		}
	}
	return size * count
}

// StartableFloorMB is the floor a bridge's s3fs is given when availMB is free (to a process,
// statvfs f_bavail, as s3fs reads it) on its temporary files' filesystem now; availMB < 0 is
// unknown. It is floorMB while s3fs can start above it. Below that s3fs refuses to start
// ("no enough disk space"), which would leave the pods on a dead mount although the node is not
// short of disk (kubelet's eviction threshold lies below the floor); it then gets what is free now
// less its start-up need and a margin: it serves reads, and its writes add at most that much to
// the node's disk use. lowered says whether floorMB was lowered.
func StartableFloorMB(floorMB, availMB int64, options []string) (mb int64, lowered bool) {
	need := startNeedMB(options) + startMarginMB
	if availMB < 0 || availMB >= floorMB+need {
		return floorMB, false
	}
	return max(availMB-need, 1), true
}

// DiskFreeFloorMB is the space in MB a bridge's s3fs leaves free on its temporary files'
// filesystem of fsBytes (0: unknown): s3.bridgeDiskFreeMB, or s3.bridgeDiskFreePercent of the
// filesystem when that is more.
func DiskFreeFloorMB(cfg *config.Config, fsBytes int64) int64 {
	floor := max(cfg.S3.BridgeDiskFreeMB, 1)
	if fsBytes > 0 && cfg.S3.BridgeDiskFreePercent > 0 {
		floor = max(floor, (fsBytes/100*int64(cfg.S3.BridgeDiskFreePercent)+(1<<20)-1)>>20)
	}
	return floor
}
