package csitest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

// Field layouts of the plugin: where s3fs mounts, what it mounts, and how much NodeUnpublish
// takes away.
const (
	// LayoutPlain: s3fs of bucket[:/prefix] directly at the target; NodeUnpublish unmounts the
	// top mount only, as the field drivers do. The default.
	LayoutPlain = "plain"
	// LayoutDirect: as LayoutPlain, but NodeUnpublish unmounts everything stacked at the target
	// (pvrescue's binds included): the end-to-end suite's friendliest driver.
	LayoutDirect = "direct"
	// LayoutYandex: as ru.yandex.s3.csi — STAGE_UNSTAGE, s3fs at kubelet's staging path, a bind
	// to each target; NodeUnpublish unmounts the top mount only.
	LayoutYandex = "yandex"
	// LayoutCtrox: as ch.ctrox.csi.s3-driver — s3fs of bucket:/<prefix>/csi-fs (bucket:/<prefix>
	// with usePrefix) directly at the target; NodeUnpublish unmounts the top mount only.
	LayoutCtrox = "ctrox"
	// LayoutStrict: as LayoutPlain, but NodeUnpublish is k8s-csi-s3's: a plain umount of the
	// target, not idempotent — codes.Internal on any error, EINVAL when nothing is mounted there
	// (kubelet then retries for ever and the pod stays Terminating).
	LayoutStrict = "strict"
)

// Options configures the plugin. Start and Run take an empty field as NewOptions' value.
type Options struct {
	// Driver is the name the plugin and its registration report.
	Driver string
	// NodeID is what NodeGetInfo reports (the node name).
	NodeID string
	// KubeletDir is kubelet's root directory; the default Socket is under it.
	KubeletDir string
	// Socket is the unix socket the plugin serves CSI on ("unix://" may prefix it). Empty means
	// the node's usual path, <KubeletDir>/plugins/<Driver>/csi.sock; in a container it is the
	// container's view of that path (/csi/csi.sock).
	Socket string
	// RegistrationSocket, when set, is served in process as node-driver-registrar serves
	// <kubelet>/plugins_registry/<driver>-reg.sock: GetInfo names Driver and Socket.
	RegistrationSocket string
	// StateDir holds the s3fs password files.
	StateDir string
	// S3fs is the s3fs program.
	S3fs string
	// MountTimeout bounds the wait for s3fs to show up at the path.
	MountTimeout time.Duration
	// UnmountWait bounds the wait, after an unmount, for the FUSE process whose command line
	// names the path to exit (k8s-csi-s3's FuseUnmount); past it the call fails and kubelet retries.
	UnmountWait time.Duration
	// Layout is the field layout the plugin imitates (LayoutPlain, LayoutDirect, LayoutYandex,
	// LayoutCtrox, LayoutStrict).
	Layout string
}

// NewOptions returns the defaults: the first S3 driver pvrescue knows, /var/lib/kubelet, node ID
// "node", the plain layout.
func NewOptions() *Options {
	d := config.Default()
	return &Options{
		Driver:       d.S3.Drivers[0],
		NodeID:       "node",
		KubeletDir:   d.KubeletDir,
		StateDir:     "/run/csi-s3-test",
		S3fs:         "s3fs",
		MountTimeout: 30 * time.Second,
		UnmountWait:  10 * time.Second,
		Layout:       LayoutPlain,
	}
}

// withDefaults returns o with every empty field set to NewOptions' value.
func (o Options) withDefaults() Options {
	d := NewOptions()
	for _, f := range []struct {
		v   *string
		def string
	}{{&o.Driver, d.Driver}, {&o.NodeID, d.NodeID}, {&o.KubeletDir, d.KubeletDir}, {&o.StateDir, d.StateDir},
		{&o.S3fs, d.S3fs}, {&o.Layout, d.Layout}} {
		if *f.v == "" {
			*f.v = f.def
		}
	}
	if o.MountTimeout <= 0 {
		o.MountTimeout = d.MountTimeout
	}
	if o.UnmountWait <= 0 {
		o.UnmountWait = d.UnmountWait
	}
	return o
}

// AddFlags registers the options (the container's command line).
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Driver, "driver", o.Driver, "CSI driver name")
	fs.StringVar(&o.NodeID, "node-id", o.NodeID, "node id reported to kubelet (the node name)")
	fs.StringVar(&o.KubeletDir, "kubelet-dir", o.KubeletDir, "kubelet root directory")
	fs.StringVar(&o.Socket, "endpoint", o.Socket, "CSI socket to serve (default <kubelet-dir>/plugins/<driver>/csi.sock)")
	fs.StringVar(&o.StateDir, "state-dir", o.StateDir, "directory for s3fs password files")
	fs.StringVar(&o.S3fs, "s3fs", o.S3fs, "s3fs executable")
	fs.DurationVar(&o.MountTimeout, "mount-timeout", o.MountTimeout, "bound of the wait for s3fs to mount")
	fs.DurationVar(&o.UnmountWait, "unmount-wait", o.UnmountWait, "bound of the wait for a FUSE process to exit after its unmount")
	fs.StringVar(&o.Layout, "layout", o.Layout, "field layout: plain (top-only unpublish), direct (unpublish everything stacked), yandex (staging + bind, top-only unpublish), ctrox (<prefix>/csi-fs, top-only unpublish) or strict (plain umount of the target, Internal when not mounted)")
}

// ErrInvalidOptions is wrapped by Validate's errors.
var ErrInvalidOptions = errors.New("invalid test CSI plugin options")

// Validate checks the options.
func (o *Options) Validate() error {
	if o.Driver == "" || o.NodeID == "" || o.KubeletDir == "" || o.StateDir == "" {
		return fmt.Errorf("%w: --driver, --node-id, --kubelet-dir and --state-dir are required", ErrInvalidOptions)
	}
	switch o.Layout {
	case LayoutPlain, LayoutDirect, LayoutYandex, LayoutCtrox, LayoutStrict:
	default:
		return fmt.Errorf("%w: --layout %q (plain, direct, yandex, ctrox or strict)", ErrInvalidOptions, o.Layout)
	}
	return nil
}

// CSISocket is where the plugin serves CSI.
func (o *Options) CSISocket() string {
	if o.Socket != "" {
		return strings.TrimPrefix(o.Socket, "unix://")
	}
	return HostCSISocket(o.KubeletDir, o.Driver)
}

// HostCSISocket is the node's path of a driver's CSI socket, as kubelet and the agent dial it.
func HostCSISocket(kubeletDir, driver string) string {
	return filepath.Join(kubeletDir, "plugins", driver, "csi.sock")
}

// RegistrationSocketName is the registration socket's file name in plugins_registry, as
// node-driver-registrar names it.
func RegistrationSocketName(driver string) string { return driver + "-reg.sock" }

// MountArgs builds the s3fs command line for a volume, the way csi-s3 style drivers do:
// bucket[:/prefix] from the attributes or the handle, endpoint from the attributes or the secret.
// It is pure; passwdFile holds the credentials.
func MountArgs(layout, handle string, attrs, secrets map[string]string, target, passwdFile string) ([]string, error) {
	keys := config.Default().S3
	bucket, prefix := attrs[keys.Parameters.Bucket], attrs[keys.Parameters.Prefix]
	if bucket == "" {
		bucket, prefix, _ = strings.Cut(handle, "/")
	}
	if bucket == "" {
		return nil, fmt.Errorf("no bucket in attributes or handle %q", handle)
	}
	endpoint := attrs[keys.Parameters.Endpoint]
	if e := secrets[keys.SecretKeys.Endpoint]; e != "" {
		endpoint = e
	}
	if endpoint == "" {
		return nil, errors.New("no endpoint in attributes or secret")
	}
	prefix = strings.Trim(prefix, "/")
	if layout == LayoutCtrox && attrs["usePrefix"] != "true" {
		prefix = strings.Trim(prefix+"/csi-fs", "/")
	}
	src := bucket
	if prefix != "" {
		src += ":/" + prefix
	}
	args := []string{src, target, "-f",
		"-o", "passwd_file=" + passwdFile, "-o", "url=" + endpoint, "-o", "use_path_request_style", "-o", "allow_other"}
	fsType, err := MountType(attrs)
	if err != nil {
		return nil, err
	}
	if sub := strings.TrimPrefix(fsType, "fuse."); sub != "s3fs" {
		// Another mounter (k8s-csi-s3's geesefs, rclone) is served by s3fs over the same
		// objects, under that program's mount type (libfuse's subtype), so the node sees what
		// the real driver's mount shows.
		args = append(args, "-o", "subtype="+sub)
	}
	for _, o := range strings.Fields(attrs[keys.Parameters.MountOptions]) {
		if o = strings.TrimPrefix(o, "-o"); o != "" {
			args = append(args, "-o", o)
		}
	}
	return args, nil
}

// mounterRe is the form of a mounter attribute's value the plugin accepts.
var mounterRe = regexp.MustCompile(`^[a-z0-9]{1,32}$`)

// MountType is the mount type of the plugin's mount of a volume with attributes attrs: the
// volume's "mounter" attribute chooses the program k8s-csi-s3 would run; the plugin always runs
// s3fs, presenting the mount as fuse.<mounter> (fuse.s3fs without the attribute).
func MountType(attrs map[string]string) (string, error) {
	m := attrs["mounter"]
	if m == "" {
		return "fuse.s3fs", nil
	}
	if !mounterRe.MatchString(m) {
		return "", fmt.Errorf("mounter %q: want lowercase letters and digits", m)
	}
	return "fuse." + m, nil
}

// TopAt returns the top mount of table at path, from the bottom-to-top stack mountinfo.Stack
// builds (dead FUSE mounts included, which a stat-based check cannot see).
func TopAt(table []mountinfo.Mount, path string) (mountinfo.Mount, bool) {
	stack := mountinfo.Stack(table, path, mountinfo.Mount.Place)
	if len(stack) == 0 {
		return mountinfo.Mount{}, false
	}
	return stack[len(stack)-1], true
}

// findFuseProcess returns the first process (other than this one) under procDir whose command
// line names path, or 0.
func findFuseProcess(procDir, path string) int {
	ents, err := os.ReadDir(procDir)
	if err != nil {
		return 0
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if cmdlineNames(procDir, pid, path) {
			return pid
		}
	}
	return 0
}

// cmdlineNames reports whether the command line of pid contains path (as upstream matches it).
func cmdlineNames(procDir string, pid int, path string) bool {
	b, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "cmdline"))
	return err == nil && bytes.Contains(b, []byte(path))
}
