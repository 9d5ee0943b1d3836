package s3mount

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/pvrescue/pvrescue/internal/config"
)

// Sentinel errors for bad input; each maps to an Event reason (see Reason).
var (
	ErrNotS3            = errors.New("not an S3 CSI volume")
	ErrNoBucket         = errors.New("no bucket in the volume handle or attributes")
	ErrUnsupported      = errors.New("volume attributes ask for something s3fs cannot do")
	ErrBadOptions       = errors.New("unsupported mount options")
	ErrNoSecretRef      = errors.New("no credentials secret referenced by the PV or its StorageClass")
	ErrSecretNotFound   = errors.New("credentials secret not found")
	ErrSecretKeyMissing = errors.New("credentials secret lacks a required key")
	ErrS3fs             = errors.New("s3fs did not mount")
	ErrMount            = errors.New("mount operation failed")
)

// Parameter names of the CSI external-provisioner (StorageClass parameters).
const (
	paramNodePublishSecretName      = "csi.storage.k8s.io/node-publish-secret-name"
	paramNodePublishSecretNamespace = "csi.storage.k8s.io/node-publish-secret-namespace"
	paramProvisionerSecretName      = "csi.storage.k8s.io/provisioner-secret-name"
	paramProvisionerSecretNamespace = "csi.storage.k8s.io/provisioner-secret-namespace"
	// attrMounter is how csi-s3 style drivers choose their FUSE program; we only speak s3fs.
	attrMounter = "mounter"
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
	// Options are extra s3fs -o options from the StorageClass / volume attributes.
	Options []string
	// ReadOnly is the PV's own read-only flag (spec.csi.readOnly or an "ro" mount option).
	ReadOnly  bool
	SecretRef *corev1.SecretReference
}

// S3Driver returns the S3 driver name of a PV: spec.csi.driver when it is a configured S3 driver,
// else the provisioner annotation of its claim. ok=false when the PV is not an S3 volume.
func S3Driver(cfg *config.Config, pv *corev1.PersistentVolume, pvc *corev1.PersistentVolumeClaim) (string, bool) {
	if pv == nil || pv.Spec.CSI == nil {
		return "", false
	}
	if cfg.IsS3Driver(pv.Spec.CSI.Driver) {
		return pv.Spec.CSI.Driver, true
	}
	if pvc != nil {
		for _, k := range []string{"volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner"} {
			if p := pvc.Annotations[k]; p != "" && cfg.IsS3Driver(p) {
				return pv.Spec.CSI.Driver, true
			}
		}
	}
	return "", false
}

// ResolveVolume reads bucket, prefix, endpoint, region, options and the secret reference from
// the PV's volume attributes first (what the node plugin itself receives), then the
// StorageClass parameters. sc may be nil. It is pure.
func ResolveVolume(pv *corev1.PersistentVolume, sc *storagev1.StorageClass, p config.S3Parameters) (Volume, error) {
	if pv == nil || pv.Spec.CSI == nil {
		return Volume{}, ErrNotS3
	}
	csi := pv.Spec.CSI
	var scParams map[string]string
	if sc != nil {
		scParams = sc.Parameters
	}
	get := func(key string) string {
		if key == "" {
			return ""
		}
		if v := csi.VolumeAttributes[key]; v != "" {
			return v
		}
		return scParams[key]
	}
	v := Volume{
		PV:       pv.Name,
		Driver:   csi.Driver,
		Handle:   csi.VolumeHandle,
		Endpoint: get(p.Endpoint),
		Region:   get(p.Region),
		ReadOnly: csi.ReadOnly || slices.Contains(pv.Spec.MountOptions, "ro"),
	}
	if m := get(attrMounter); m != "" && m != "s3fs" {
		return Volume{}, fmt.Errorf("%w: mounter %q (only s3fs can be restored)", ErrUnsupported, m)
	}
	// Common s3fs drivers use "bucket/prefix" or "bucket" as the volume handle.
	hBucket, hPrefix, _ := strings.Cut(csi.VolumeHandle, "/")
	v.Bucket, v.Prefix = get(p.Bucket), get(p.Prefix)
	switch {
	case v.Bucket == "":
		v.Bucket = hBucket
		if v.Prefix == "" {
			v.Prefix = hPrefix
		}
	case v.Prefix == "" && hBucket == v.Bucket:
		v.Prefix = hPrefix
	}
	v.Prefix = strings.Trim(v.Prefix, "/")
	if v.Bucket == "" || strings.ContainsAny(v.Bucket, ":/ \n") {
		return Volume{}, fmt.Errorf("%w: handle %q", ErrNoBucket, csi.VolumeHandle)
	}
	opts, err := ParseOptions(get(p.MountOptions))
	if err != nil {
		return Volume{}, err
	}
	v.Options = opts
	v.SecretRef = secretRef(pv, scParams)
	if v.SecretRef == nil {
		return Volume{}, ErrNoSecretRef
	}
	return v, nil
}

// secretRef picks the PV's nodePublishSecretRef, else the StorageClass's node-publish secret,
// else its provisioner secret, expanding the ${pv.name}/${pvc.name}/${pvc.namespace} templates.
func secretRef(pv *corev1.PersistentVolume, params map[string]string) *corev1.SecretReference {
	if r := pv.Spec.CSI.NodePublishSecretRef; r != nil && r.Name != "" {
		return r.DeepCopy()
	}
	expand := func(s string) string {
		r := strings.NewReplacer("${pv.name}", pv.Name)
		if c := pv.Spec.ClaimRef; c != nil {
			r = strings.NewReplacer("${pv.name}", pv.Name, "${pvc.name}", c.Name, "${pvc.namespace}", c.Namespace)
		}
		return r.Replace(s)
	}
	for _, pair := range [][2]string{
		{paramNodePublishSecretName, paramNodePublishSecretNamespace},
		{paramProvisionerSecretName, paramProvisionerSecretNamespace},
	} {
		if name := params[pair[0]]; name != "" {
			return &corev1.SecretReference{Name: expand(name), Namespace: expand(params[pair[1]])}
		}
	}
	return nil
}

// reservedOptions are s3fs options the restorer sets itself; a volume may not override them.
var reservedOptions = []string{"passwd_file", "url", "fsname", "endpoint", "use_path_request_style"}

// ParseOptions reads a mount-options string of the form "-o a,b -o c=d" (or "-oa") into the
// list of s3fs -o options. Anything else is rejected rather than passed to s3fs blindly.
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
			key, _, _ := strings.Cut(o, "=")
			if slices.Contains(reservedOptions, key) {
				return nil, fmt.Errorf("%w: %q is set by pvrescue", ErrBadOptions, key)
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

// S3fsArgs builds the s3fs command line (without the program). s3fs runs in the foreground (-f)
// so the agent owns and supervises it. The secret endpoint overrides the volume's.
func S3fsArgs(v Volume, c Credentials, staging, passwdFile string) []string {
	source := v.Bucket
	if v.Prefix != "" {
		source += ":/" + v.Prefix
	}
	args := []string{source, staging, "-f",
		"-o", "passwd_file=" + passwdFile,
		"-o", "fsname=" + FSName(v.PV),
		"-o", "use_path_request_style",
		// Containers run as any user; csi-s3 style drivers mount with allow_other too.
		"-o", "allow_other",
	}
	endpoint, region := v.Endpoint, v.Region
	if c.Endpoint != "" {
		endpoint = c.Endpoint
	}
	if c.Region != "" {
		region = c.Region
	}
	if endpoint != "" {
		args = append(args, "-o", "url="+endpoint)
	}
	if region != "" {
		args = append(args, "-o", "endpoint="+region)
	}
	for _, o := range v.Options {
		args = append(args, "-o", o)
	}
	return args
}

// Reason is the Event reason detail for an error of the restorer.
func Reason(err error) string {
	for _, r := range []struct {
		err    error
		reason string
	}{
		{ErrSecretNotFound, "SecretNotFound"},
		{ErrSecretKeyMissing, "SecretKeyMissing"},
		{ErrNoSecretRef, "NoSecretRef"},
		{ErrNoBucket, "BadVolumeAttributes"},
		{ErrUnsupported, "BadVolumeAttributes"},
		{ErrBadOptions, "BadVolumeAttributes"},
		{ErrS3fs, "S3fsFailed"},
		{ErrMount, "MountFailed"},
	} {
		if errors.Is(err, r.err) {
			return r.reason
		}
	}
	return "Error"
}
