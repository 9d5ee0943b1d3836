// Package config holds the configuration file shared by the pvrescue webhook and node agent.
//
// The file is YAML, versioned by apiVersion/kind, decoded strictly (unknown fields are errors)
// and validated with messages that name the offending field.
package config

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

const (
	// APIVersion is the only configuration version this build understands.
	APIVersion = "pvrescue.io/v1alpha1"
	// Kind of the configuration object.
	Kind = "Config"
)

// ErrInvalid is wrapped by every validation error, so callers can tell bad input from I/O errors.
var ErrInvalid = errors.New("invalid pvrescue configuration")

// Config is the whole configuration file.
type Config struct {
	// APIVersion must be pvrescue.io/v1alpha1, stated by the file itself.
	APIVersion string `json:"apiVersion"`
	// Kind must be Config, stated by the file itself.
	Kind string `json:"kind"`

	// LocalBlock configures the lost-local-disk rescue.
	LocalBlock LocalBlock `json:"localBlock"`
	// S3 configures the lost-FUSE-mount rescue.
	S3 S3 `json:"s3"`
	// Helper is the small static binary the webhook injects into pods.
	Helper Helper `json:"helper"`
	// KubeletDir is kubelet's root directory on the node.
	KubeletDir string `json:"kubeletDir"`
	// StateDir is where the agent keeps everything it owns (fake images, staging mounts).
	StateDir string `json:"stateDir"`
	// RescueAllNamespaces makes the agent act for every pod on its node whose volume it knows.
	// false (the default): it acts only for pods whose namespace is labelled
	// pvrescue.io/inject=enabled (the label the webhook's namespaceSelector matches, read from
	// the Namespace object, never from the pod) and that are not labelled pvrescue.io/inject=false;
	// the others' volumes are left as their driver leaves them, with no Event and no metric
	// series. true costs consent: the agent remounts, bridges (with its own s3fs, on the node's
	// CPU and memory) and reports on pods whose owners never asked for it, and tenants who did
	// not opt in can drive that work. false costs one more informer per agent: every Namespace
	// of the cluster listed and watched.
	RescueAllNamespaces bool `json:"rescueAllNamespaces"`
}

// LocalBlock configures fake devices for lost local block volumes.
type LocalBlock struct {
	// StorageClasses whose block PVs are local disks that may go missing (at least one; an
	// empty list is an error).
	StorageClasses []string `json:"storageClasses"`
	// FakeDeviceSizeBytes is the exact size of a fake device; the guard treats any device of this
	// size as fake, so it must be smaller than any real disk.
	FakeDeviceSizeBytes int64 `json:"fakeDeviceSizeBytes"`
	// FirstLoopMinor is the first loop device number the agent may use (/dev/loopN).
	FirstLoopMinor int `json:"firstLoopMinor"`
	// NodeLabel gates fake-device creation: the agent creates fakes only on nodes where this label
	// has the value "enabled". Elsewhere it only reports.
	NodeLabel string `json:"nodeLabel"`
	// ResyncPeriod is the periodic re-check on top of filesystem events.
	ResyncPeriod metav1.Duration `json:"resyncPeriod"`
	// MissingWarningAfter raises a warning Event when a path stays missing this long.
	MissingWarningAfter metav1.Duration `json:"missingWarningAfter"`
	// PathRoots: a PV's spec.local.path must lie under one of them (kernel device names such as
	// /dev/sdb are also accepted: followed, never faked).
	PathRoots []string `json:"pathRoots"`
	// LinkRoots: the agent puts a fake link only at a missing path under one of them (udev's
	// stable-name directories); admins' links elsewhere are never changed.
	LinkRoots []string `json:"linkRoots"`
}

// S3 configures the restoration of s3fs mounts.
type S3 struct {
	// Drivers are CSI driver / provisioner names of s3fs-based drivers.
	Drivers []string `json:"drivers"`
	// LivenessProbe makes the webhook inject a probe into containers mounting S3 volumes.
	LivenessProbe bool `json:"livenessProbe"`
	// MountPropagation makes the webhook set HostToContainer on S3 mounts where unset.
	MountPropagation bool `json:"mountPropagation"`
	// Probe timings of the injected livenessProbe.
	Probe Probe `json:"probe"`
	// CheckInterval is how often the agent checks the mounts on its node when nothing is under
	// way: a safety net, since FUSE daemon exits, pod changes and returning plugin sockets wake it
	// at once. A hung (stopped, not exited) daemon is noticed at the latest after this long.
	CheckInterval metav1.Duration `json:"checkInterval"`
	// PendingCheckInterval is how often it checks while something only time moves on is under
	// way: a dead target waiting for bridgeAfter, a hung mount, a restore in flight or backing
	// off, a bridge waiting to be handed back. Capped at checkInterval.
	PendingCheckInterval metav1.Duration `json:"pendingCheckInterval"`
	// StatfsTimeout bounds one health check of a mount.
	StatfsTimeout metav1.Duration `json:"statfsTimeout"`
	// SecretKeys names the keys read from the volume's secret.
	SecretKeys SecretKeys `json:"secretKeys"`
	// Parameters names the StorageClass parameters / volume attributes the agent reads.
	Parameters S3Parameters `json:"parameters"`
	// S3fsPath is the s3fs executable the agent runs.
	S3fsPath string `json:"s3fsPath"`
	// ReplayDrivers are the CSI drivers whose node plugin the agent may call to restore a dead
	// volume (kubelet's NodeStageVolume/NodePublishVolume replayed). Not limited to S3 drivers.
	ReplayDrivers []string `json:"replayDrivers"`
	// BridgeAfter is how long a target stays dead before the agent bridges it with its own
	// s3fs when its replay driver answers but the replay fails, and when the driver does not
	// answer but the PV's bridges flap (bridgeFlapLimit). 0 bridges at once.
	BridgeAfter metav1.Duration `json:"bridgeAfter"`
	// DriverDownBridgeAfter is how long a target stays dead with its replay driver not answering
	// (socket absent or refusing: the plugin restarting, rolled out or gone) before the agent
	// bridges it. 0 (the default) bridges at once: one s3fs per PV, handed back to the driver's
	// own mount, open files kept, the moment the driver answers again. 10s gives the earlier
	// behaviour (wait for a restarting plugin, then bridge).
	DriverDownBridgeAfter metav1.Duration `json:"driverDownBridgeAfter"`
	// BridgeFlapLimit bounds the bridges of one PV started because its driver did not answer:
	// after this many within bridgeFlapWindow (a plugin dying every few seconds), the next waits
	// bridgeAfter instead of driverDownBridgeAfter. 0: no limit.
	BridgeFlapLimit int `json:"bridgeFlapLimit"`
	// BridgeFlapWindow is the window over which bridgeFlapLimit counts a PV's bridges.
	BridgeFlapWindow metav1.Duration `json:"bridgeFlapWindow"`
	// HungConditionAfter is how long a mount must stay hung (statfs timing out while its FUSE
	// daemon still holds the connection) before the agent sets the Node condition S3MountHung.
	HungConditionAfter metav1.Duration `json:"hungConditionAfter"`
	// AbortHungAfter, when set, is how long a mount may stay hung before the agent aborts its
	// FUSE connection (/sys/fs/fuse/connections/<minor>/abort), so the old daemon can never
	// write late, and then restores it like a dead one. 0 (the default): a hung mount is
	// reported and waited for, never replaced. A mount served by the agent's own bridge is
	// never aborted: it is judged by the bridge's own health (its s3fs process and mount).
	AbortHungAfter metav1.Duration `json:"abortHungAfter"`
	// BridgeDiskFreeMB bounds the node disk a bridge's s3fs may fill with its temporary files
	// (<state>/s3/tmp/<pv>): s3fs's ensure_diskfree, the free space in MB it leaves on that
	// filesystem (below it s3fs stops caching and uploads from memory). s3fs 1.90 refuses to
	// start when less than this plus one multipart batch (about 50 MB) is free; a bridge started
	// on a node that has less free than the floor gets instead what is free then less that batch
	// and 16 MB, so it serves reads and may add at most that much to the node's disk use (logged).
	// Must be at least 1.
	BridgeDiskFreeMB int64 `json:"bridgeDiskFreeMB"`
	// BridgeDiskFreePercent raises that floor with the filesystem's size: a bridge leaves at least
	// this share of its temporary files' filesystem free, above kubelet's default hard eviction
	// threshold (nodefs.available<10%), so a bridge's writes never make kubelet evict the node's
	// pods. A volume's own ensure_diskfree option may raise the floor, never lower it. 0..90.
	BridgeDiskFreePercent int `json:"bridgeDiskFreePercent"`
	// BridgeLimits bound the CPU and memory of the agent's own s3fs bridges, each and all
	// together (cgroup v1: cpu.cfs_quota_us over cpu.cfs_period_us, memory.limit_in_bytes; v2:
	// cpu.max, memory.max), in the bridges' cgroups (pvrescue/s3 and pvrescue/s3/<pv>-<pid>),
	// which keep the kernel's default CPU weight: no bridge outranks a pod. A bridge's work is
	// charged to these groups, not to the pods whose reads and writes it serves.
	BridgeLimits BridgeLimits `json:"bridgeLimits"`
	// Profiles say, per CSI driver, how its mount is laid out, so the bridge reproduces it.
	// Built in: ru.yandex.s3.csi and ch.ctrox.csi.s3-driver (Default). A profile given here
	// replaces the driver's built-in one as a whole; drivers without one get GenericS3Profile.
	Profiles map[string]S3Profile `json:"profiles"`
}

// BridgeLimits bound the bridges' cgroups.
type BridgeLimits struct {
	// PerBridge bounds each bridge's own group (one s3fs). A bridge at its memory limit is killed
	// by the kernel (its pods then read ENOTCONN until the next bridge or the driver's return);
	// at its CPU limit it is throttled (its pods' reads and writes wait).
	PerBridge CgroupLimits `json:"perBridge"`
	// All bounds the bridges' parent group: every bridge of the node together.
	All CgroupLimits `json:"all"`
	// WarnPercent is the share of a limit at which a bridge (or all of them) is reported as
	// near its cap: Event BridgeNearLimit on the Node and
	// pvrescue_s3_bridge_near_limit_total{scope,resource} (1..100).
	WarnPercent int `json:"warnPercent"`
}

// CgroupLimits are a group's CPU and memory limits.
type CgroupLimits struct {
	// CPU is the CPU time per period the group may use, in cores (500m: half of one core). In
	// round 22's 100-pod window the bridge's s3fs ran 20-45 ms per 100 ms on a 2-core node,
	// waiting on the run queue for more: the default per bridge (1) leaves it room to catch up.
	CPU resource.Quantity `json:"cpu"`
	// Memory is the group's memory limit (page cache of the files s3fs writes included).
	Memory resource.Quantity `json:"memory"`
}

// S3Profile is one driver's mount layout.
type S3Profile struct {
	// FUSEType is the mount type of the driver's mount when it runs s3fs (e.g. "fuse.s3fs"):
	// only a dead mount of that type is bridged.
	FUSEType string `json:"fuseType"`
	// BucketAttribute and PrefixAttribute name the volume attributes holding bucket and prefix
	// (empty: s3.parameters' names); a volume handle "bucket/prefix" fills what they leave empty.
	BucketAttribute string `json:"bucketAttribute,omitempty"`
	// PrefixAttribute names the volume attribute holding the prefix (empty: s3.parameters.prefix);
	// see bucketAttribute.
	PrefixAttribute string `json:"prefixAttribute,omitempty"`
	// Subdir is appended to the prefix (ctrox's csi-fs), unless the volume attribute named by
	// UsePrefixAttribute is "true".
	Subdir string `json:"subdir,omitempty"`
	// UsePrefixAttribute names the volume attribute that, when "true", mounts the prefix itself
	// without subdir (only meaningful with subdir).
	UsePrefixAttribute string `json:"usePrefixAttribute,omitempty"`
	// MounterAttribute names the volume attribute choosing the FUSE program; DefaultMounter is
	// the program the driver runs without it ("" unknown: the volume must name one); S3fsMounters
	// are the values that mean s3fs.
	MounterAttribute string `json:"mounterAttribute"`
	// DefaultMounter is the FUSE program the driver runs when the volume names none ("" unknown:
	// the volume must name one).
	DefaultMounter string `json:"defaultMounter,omitempty"`
	// S3fsMounters are the values of the mounter attribute that mean s3fs (at least one).
	S3fsMounters []string `json:"s3fsMounters"`
	// Mounters are the driver's other FUSE programs, by the value of the mounter attribute that
	// selects each: the mount type the driver's mount of it shows, and whether the agent bridges
	// a dead one with its own s3fs (the same objects, read and written as s3fs does: see the
	// differences in docs/operations.md, "Bridging geesefs and rclone volumes"). A value in
	// neither list is reported (CannotReproduce), never guessed.
	Mounters map[string]S3Mounter `json:"mounters,omitempty"`
}

// Bridge choices of an S3Mounter.
const (
	// BridgeS3fs: a dead mount of the program is served by the agent's s3fs over the same
	// bucket/prefix, its options mapped to s3fs's (ProgramGeesefs, ProgramRclone).
	BridgeS3fs = "s3fs"
	// BridgeNone: a dead mount of the program is reported (CannotReproduce) and left for the
	// driver, as for a program pvrescue does not know.
	BridgeNone = "none"
)

// FUSE programs an S3Mounter may name: how the volume's options attribute is read.
const (
	// ProgramGeesefs: geesefs (k8s-csi-s3's default), options as geesefs flags.
	ProgramGeesefs = "geesefs"
	// ProgramRclone: rclone mount of an :s3: remote, options as rclone flags.
	ProgramRclone = "rclone"
)

// S3Mounter is one FUSE program of a driver other than s3fs.
type S3Mounter struct {
	// Program is the FUSE program the driver runs for this value: geesefs or rclone. It says how
	// the volume's options attribute is read (that program's flags) before being mapped to s3fs
	// options; a flag without a mapping leaves the volume unbridged (CannotReproduce).
	Program string `json:"program"`
	// FUSEType is the mount type of the driver's mount with this program (e.g. "fuse.geesefs"):
	// a dead mount of this type is the one the bridge may stand in for.
	FUSEType string `json:"fuseType"`
	// Bridge is how the agent stands in for a dead mount of it while the driver is down:
	// "s3fs" (its own s3fs over the same objects) or "none" (reported, left for the driver).
	Bridge string `json:"bridge"`
}

// Mounter says which FUSE program a volume with attributes attrs runs under this profile: the
// attribute's value (the default when absent, "" when unknown), and how the agent bridges it
// (known=false: neither s3fs nor one of Mounters). An s3fs value reads as Program "s3fs" with the
// profile's FUSEType, bridged by s3fs.
func (p S3Profile) Mounter(attrs map[string]string) (value string, m S3Mounter, known bool) {
	value = attrs[p.MounterAttribute]
	if value == "" {
		value = p.DefaultMounter
	}
	if value == "" {
		return "", S3Mounter{}, false
	}
	if slices.Contains(p.S3fsMounters, value) {
		return value, S3Mounter{Program: "s3fs", FUSEType: p.FUSEType, Bridge: BridgeS3fs}, true
	}
	m, known = p.Mounters[value]
	return value, m, known
}

// FUSETypeOf is the mount type of the driver's mount of a volume with attributes attrs: its
// mounter's (fuse.geesefs for a geesefs volume), else the profile's s3fs type. A driver mount
// handed a volume back (replayed) must be of it.
func (p S3Profile) FUSETypeOf(attrs map[string]string) string {
	if _, m, known := p.Mounter(attrs); known && m.FUSEType != "" {
		return m.FUSEType
	}
	return p.FUSEType
}

// BridgedFUSETypes are the mount types of the driver's mounts the agent's s3fs may stand in for:
// its s3fs type and that of every mounter bridged with s3fs, sorted.
func (p S3Profile) BridgedFUSETypes() []string {
	out := []string{p.FUSEType}
	for _, m := range p.Mounters {
		if m.Bridge == BridgeS3fs {
			out = append(out, m.FUSEType)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// GenericS3Profile is the layout assumed for a driver without a profile: s3fs only when the
// volume says "mounter: s3fs", mounted as fuse.s3fs at bucket[:/prefix].
func GenericS3Profile() S3Profile {
	return S3Profile{FUSEType: "fuse.s3fs", MounterAttribute: "mounter", S3fsMounters: []string{"s3fs"}}
}

// Profile returns driver's profile (GenericS3Profile when it has none).
func (s S3) Profile(driver string) S3Profile {
	if p, ok := s.Profiles[driver]; ok {
		return p
	}
	return GenericS3Profile()
}

var (
	profileAttrRe   = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_./]*)?[A-Za-z0-9]$`)
	profileSubdirRe = regexp.MustCompile(`^[A-Za-z0-9._~@+=-]+(/[A-Za-z0-9._~@+=-]+)*$`)
	profileFUSERe   = regexp.MustCompile(`^fuse(\.[a-z0-9_-]+)?$`)
	profileProgRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
)

// validate reports what is wrong with one profile, each message prefixed with where.
func (p S3Profile) validate(where string) []string {
	var errs []string
	add := func(format string, args ...any) { errs = append(errs, where+"."+fmt.Sprintf(format, args...)) }
	if !profileFUSERe.MatchString(p.FUSEType) {
		add("fuseType: must be fuse or fuse.<name>, got %q", p.FUSEType)
	}
	for name, v := range map[string]string{"bucketAttribute": p.BucketAttribute, "prefixAttribute": p.PrefixAttribute,
		"usePrefixAttribute": p.UsePrefixAttribute} {
		if v != "" && !profileAttrRe.MatchString(v) {
			add("%s: %q is not an attribute name", name, v)
		}
	}
	if !profileAttrRe.MatchString(p.MounterAttribute) {
		add("mounterAttribute: must name an attribute, got %q", p.MounterAttribute)
	}
	if p.Subdir != "" {
		bad := !profileSubdirRe.MatchString(p.Subdir)
		for _, seg := range strings.Split(p.Subdir, "/") {
			bad = bad || seg == "." || seg == ".." || strings.HasPrefix(seg, "-")
		}
		if bad {
			add("subdir: %q must be relative segments of letters, digits and ._~@+=- (no . or ..)", p.Subdir)
		}
	}
	if p.UsePrefixAttribute != "" && p.Subdir == "" {
		add("usePrefixAttribute: only meaningful with subdir")
	}
	if p.DefaultMounter != "" && !profileProgRe.MatchString(p.DefaultMounter) {
		add("defaultMounter: %q is not a program name", p.DefaultMounter)
	}
	if len(p.S3fsMounters) == 0 {
		add("s3fsMounters: must list the values meaning s3fs")
	}
	for i, m := range p.S3fsMounters {
		if !profileProgRe.MatchString(m) {
			add("s3fsMounters[%d]: %q is not a program name", i, m)
		}
	}
	for _, v := range slices.Sorted(maps.Keys(p.Mounters)) {
		m := p.Mounters[v]
		switch {
		case !profileProgRe.MatchString(v):
			add("mounters: %q is not a program name", v)
		case slices.Contains(p.S3fsMounters, v):
			add("mounters[%q]: also in s3fsMounters (a value means one program)", v)
		}
		if m.Program != ProgramGeesefs && m.Program != ProgramRclone {
			add("mounters[%q].program: must be %s or %s, got %q", v, ProgramGeesefs, ProgramRclone, m.Program)
		}
		if !profileFUSERe.MatchString(m.FUSEType) {
			add("mounters[%q].fuseType: must be fuse or fuse.<name>, got %q", v, m.FUSEType)
		}
		if m.Bridge != BridgeS3fs && m.Bridge != BridgeNone {
			add("mounters[%q].bridge: must be %s or %s, got %q", v, BridgeS3fs, BridgeNone, m.Bridge)
		}
	}
	return errs
}

// MayReplay reports whether driver is in s3.replayDrivers.
func (c *Config) MayReplay(driver string) bool { return slices.Contains(c.S3.ReplayDrivers, driver) }

// Probe holds livenessProbe timings.
type Probe struct {
	// InitialDelaySeconds of the injected livenessProbe (at least 0).
	InitialDelaySeconds int32 `json:"initialDelaySeconds"`
	// PeriodSeconds of the injected livenessProbe (at least 1).
	PeriodSeconds int32 `json:"periodSeconds"`
	// TimeoutSeconds of the injected livenessProbe (at least 1).
	TimeoutSeconds int32 `json:"timeoutSeconds"`
	// FailureThreshold of the injected livenessProbe (at least 1).
	FailureThreshold int32 `json:"failureThreshold"`
	// StatfsTimeout is passed to the helper's probe (must be below TimeoutSeconds).
	StatfsTimeout metav1.Duration `json:"statfsTimeout"`
}

// SecretKeys are the key names inside an S3 credentials secret.
type SecretKeys struct {
	// AccessKeyID is the secret's key holding the S3 access key ID (must not be empty).
	AccessKeyID string `json:"accessKeyID"`
	// SecretAccessKey is the secret's key holding the S3 secret key (must not be empty).
	SecretAccessKey string `json:"secretAccessKey"`
	// Endpoint, when present in the secret, overrides the StorageClass parameter.
	Endpoint string `json:"endpoint"`
	// Region is the secret's key holding the S3 region, when present.
	Region string `json:"region"`
}

// S3Parameters are the names of StorageClass parameters / PV volume attributes.
type S3Parameters struct {
	// Bucket names the parameter holding the bucket (must not be empty).
	Bucket string `json:"bucket"`
	// Prefix names the parameter holding the prefix inside the bucket.
	Prefix string `json:"prefix"`
	// Endpoint names the parameter holding the S3 endpoint URL.
	Endpoint string `json:"endpoint"`
	// Region names the parameter holding the S3 region.
	Region string `json:"region"`
	// MountOptions names the parameter holding extra s3fs options.
	MountOptions string `json:"mountOptions"`
}

// Helper is the injected helper binary.
type Helper struct {
	// Image holds the helper binary (pvrescue-sidecar); the chart defaults it to the webhook image.
	Image string `json:"image"`
	// ImagePullPolicy of the injected containers: Always, IfNotPresent or Never.
	ImagePullPolicy string `json:"imagePullPolicy"`
	// MountPath is where the shared emptyDir is mounted in every container.
	MountPath string `json:"mountPath"`
	// RunAsUser is the (non-root) user the injected containers run as, the helper image's own user.
	// When the pod's securityContext names a non-root user, the injected containers inherit it
	// instead, so namespace policies that pin the pod's user range still accept them.
	RunAsUser int64 `json:"runAsUser"`
	// Resources of every injected container. Set both requests and limits of cpu and memory so a
	// namespace whose ResourceQuota covers them (without a LimitRange) admits the pod. Keys given in
	// the file are merged over the defaults.
	Resources Resources `json:"resources"`
}

// Resources are the requests and limits of the injected containers.
type Resources struct {
	// Requests of every injected container (cpu, memory, ephemeral-storage; each positive).
	Requests corev1.ResourceList `json:"requests"`
	// Limits of every injected container (no request above its limit).
	Limits corev1.ResourceList `json:"limits"`
}

// keepText has each quantity keep its canonical text: every admission encodes the helper's
// resources, and a quantity without its text builds it on each encoding.
func (r Resources) keepText() {
	for _, l := range []corev1.ResourceList{r.Requests, r.Limits} {
		for name, q := range l {
			_ = q.String() // computes and keeps the text in q
			l[name] = q
		}
	}
}

// Requirements returns a copy as the container field.
func (r Resources) Requirements() corev1.ResourceRequirements {
	return corev1.ResourceRequirements{Requests: r.Requests.DeepCopy(), Limits: r.Limits.DeepCopy()}
}

// Default returns the configuration used when no file is given; every field is set.
func Default() *Config {
	cfg := &Config{
		APIVersion: APIVersion,
		Kind:       Kind,
		LocalBlock: LocalBlock{
			StorageClasses:      []string{"local-ssd"},
			FakeDeviceSizeBytes: 512,
			FirstLoopMinor:      101,
			NodeLabel:           "pvrescue.io/fake-devices",
			ResyncPeriod:        metav1.Duration{Duration: 10 * time.Second},
			MissingWarningAfter: metav1.Duration{Duration: 10 * time.Minute},
			PathRoots:           []string{"/dev/disk", "/mnt/disks", "/mnt/fast-disks"},
			LinkRoots:           []string{"/dev/disk/by-id", "/dev/disk/by-path", "/dev/disk/by-uuid"},
		},
		S3: S3{
			Drivers:          []string{"ru.yandex.s3.csi", "ch.ctrox.csi.s3-driver", "csi-s3"},
			LivenessProbe:    true,
			MountPropagation: true,
			Probe: Probe{
				InitialDelaySeconds: 5,
				PeriodSeconds:       10,
				TimeoutSeconds:      5,
				FailureThreshold:    3,
				StatfsTimeout:       metav1.Duration{Duration: 3 * time.Second},
			},
			CheckInterval:        metav1.Duration{Duration: time.Minute},
			PendingCheckInterval: metav1.Duration{Duration: time.Second},
			StatfsTimeout:        metav1.Duration{Duration: 2 * time.Second},
			SecretKeys: SecretKeys{
				AccessKeyID:     "accessKeyID",
				SecretAccessKey: "secretAccessKey",
				Endpoint:        "endpoint",
				Region:          "region",
			},
			Parameters: S3Parameters{
				Bucket:       "bucket",
				Prefix:       "prefix",
				Endpoint:     "endpoint",
				Region:       "region",
				MountOptions: "options",
			},
			S3fsPath:           "s3fs",
			ReplayDrivers:      []string{"ru.yandex.s3.csi", "ch.ctrox.csi.s3-driver", "csi-s3"},
			BridgeAfter:        metav1.Duration{Duration: 10 * time.Second},
			BridgeFlapLimit:    5,
			BridgeFlapWindow:   metav1.Duration{Duration: time.Minute},
			HungConditionAfter: metav1.Duration{Duration: 30 * time.Second},
			BridgeDiskFreeMB:   1024,
			// kubelet's default nodefs.available<10%, and a margin for its soft thresholds.
			BridgeDiskFreePercent: 15,
			BridgeLimits: BridgeLimits{
				PerBridge:   CgroupLimits{CPU: resource.MustParse("1"), Memory: resource.MustParse("512Mi")},
				All:         CgroupLimits{CPU: resource.MustParse("1500m"), Memory: resource.MustParse("1Gi")},
				WarnPercent: 80,
			},
			Profiles: map[string]S3Profile{
				// Runs geesefs unless the volume says "mounter: s3fs" (or rclone). geesefs and
				// rclone store one object per file under bucket/prefix as s3fs does: a dead mount
				// of either is bridged by our s3fs (docs/operations.md lists what differs).
				"ru.yandex.s3.csi": {FUSEType: "fuse.s3fs", MounterAttribute: "mounter", DefaultMounter: "geesefs",
					S3fsMounters: []string{"s3fs"}, Mounters: map[string]S3Mounter{
						"geesefs": {Program: ProgramGeesefs, FUSEType: "fuse.geesefs", Bridge: BridgeS3fs},
						"rclone":  {Program: ProgramRclone, FUSEType: "fuse.rclone", Bridge: BridgeS3fs},
					}},
				// Mounts bucket:/<prefix>/csi-fs unless usePrefix is "true"; its default mounter
				// is not assumed.
				"ch.ctrox.csi.s3-driver": {FUSEType: "fuse.s3fs", Subdir: "csi-fs", UsePrefixAttribute: "usePrefix",
					MounterAttribute: "mounter", S3fsMounters: []string{"s3fs"}},
			},
		},
		Helper: Helper{
			Image:           "ghcr.io/pvrescue/pvrescue-webhook:v0.1.0",
			ImagePullPolicy: "IfNotPresent",
			MountPath:       "/pvrescue",
			RunAsUser:       65532,
			Resources: Resources{
				Requests: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("10m"),
					corev1.ResourceMemory: resource.MustParse("16Mi"),
				},
				Limits: corev1.ResourceList{
					corev1.ResourceCPU:    resource.MustParse("100m"),
					corev1.ResourceMemory: resource.MustParse("64Mi"),
				},
			},
		},
		KubeletDir: "/var/lib/kubelet",
		StateDir:   "/var/lib/pvrescue",
	}
	cfg.Helper.Resources.keepText()
	return cfg
}

// Parse decodes a configuration file over the defaults and validates it.
// Fields absent from the file keep their default value.
func Parse(data []byte) (*Config, error) {
	cfg := Default()
	// The version must be stated by the file itself, not inherited from the defaults.
	cfg.APIVersion, cfg.Kind = "", ""
	if err := yaml.UnmarshalStrict(data, cfg); err != nil {
		return nil, fmt.Errorf("%w: decode: %w", ErrInvalid, err)
	}
	cfg.Helper.Resources.keepText()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Load reads and parses the file at path; an empty path yields the defaults.
func Load(path string) (*Config, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// Validate reports every problem at once, each naming its field.
func (c *Config) Validate() error {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if c.APIVersion != APIVersion {
		add("apiVersion: must be %q, got %q", APIVersion, c.APIVersion)
	}
	if c.Kind != Kind {
		add("kind: must be %q, got %q", Kind, c.Kind)
	}
	if len(c.LocalBlock.StorageClasses) == 0 {
		// An empty list once meant "every local block PV", while the webhook guards pods of the
		// listed classes only: fakes would be made for pods that nothing filters.
		add("localBlock.storageClasses: must name at least one StorageClass")
	}
	for i, sc := range c.LocalBlock.StorageClasses {
		if errs := validation.IsDNS1123Subdomain(sc); len(errs) > 0 {
			add("localBlock.storageClasses[%d]: %q is not a valid StorageClass name: %s", i, sc, strings.Join(errs, "; "))
		}
	}
	if c.LocalBlock.FakeDeviceSizeBytes < 512 || c.LocalBlock.FakeDeviceSizeBytes%512 != 0 {
		add("localBlock.fakeDeviceSizeBytes: must be a positive multiple of 512, got %d", c.LocalBlock.FakeDeviceSizeBytes)
	}
	if c.LocalBlock.FakeDeviceSizeBytes > 1<<20 {
		add("localBlock.fakeDeviceSizeBytes: must be at most 1 MiB so no real disk has that size, got %d", c.LocalBlock.FakeDeviceSizeBytes)
	}
	if c.LocalBlock.FirstLoopMinor < 8 || c.LocalBlock.FirstLoopMinor > 1<<20 {
		add("localBlock.firstLoopMinor: must be between 8 and 1048576, got %d", c.LocalBlock.FirstLoopMinor)
	}
	if errs := validation.IsQualifiedName(c.LocalBlock.NodeLabel); len(errs) > 0 {
		add("localBlock.nodeLabel: %q is not a valid label key: %s", c.LocalBlock.NodeLabel, strings.Join(errs, "; "))
	}
	if c.LocalBlock.ResyncPeriod.Duration < time.Second {
		add("localBlock.resyncPeriod: must be at least 1s, got %s", c.LocalBlock.ResyncPeriod.Duration)
	}
	if len(c.LocalBlock.LinkRoots) == 0 {
		add("localBlock.linkRoots: must name at least one directory")
	}
	for name, roots := range map[string][]string{"pathRoots": c.LocalBlock.PathRoots, "linkRoots": c.LocalBlock.LinkRoots} {
		for i, d := range roots {
			if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" {
				add("localBlock.%s[%d]: %q must be an absolute, clean directory other than /", name, i, d)
			}
		}
	}
	if c.LocalBlock.MissingWarningAfter.Duration <= 0 {
		add("localBlock.missingWarningAfter: must be positive, got %s", c.LocalBlock.MissingWarningAfter.Duration)
	}
	for i, d := range c.S3.Drivers {
		if d == "" {
			add("s3.drivers[%d]: must not be empty", i)
		}
	}
	p := c.S3.Probe
	if p.PeriodSeconds < 1 || p.TimeoutSeconds < 1 || p.FailureThreshold < 1 || p.InitialDelaySeconds < 0 {
		add("s3.probe: periodSeconds, timeoutSeconds and failureThreshold must be >= 1 and initialDelaySeconds >= 0")
	}
	if p.StatfsTimeout.Duration <= 0 || p.StatfsTimeout.Duration >= time.Duration(p.TimeoutSeconds)*time.Second {
		add("s3.probe.statfsTimeout: must be positive and below timeoutSeconds (%ds), got %s", p.TimeoutSeconds, p.StatfsTimeout.Duration)
	}
	if c.S3.CheckInterval.Duration < 100*time.Millisecond {
		add("s3.checkInterval: must be at least 100ms, got %s", c.S3.CheckInterval.Duration)
	}
	if c.S3.PendingCheckInterval.Duration < 100*time.Millisecond {
		add("s3.pendingCheckInterval: must be at least 100ms, got %s", c.S3.PendingCheckInterval.Duration)
	}
	if c.S3.StatfsTimeout.Duration <= 0 {
		add("s3.statfsTimeout: must be positive, got %s", c.S3.StatfsTimeout.Duration)
	}
	if c.S3.SecretKeys.AccessKeyID == "" || c.S3.SecretKeys.SecretAccessKey == "" {
		add("s3.secretKeys: accessKeyID and secretAccessKey must name secret keys")
	}
	if c.S3.Parameters.Bucket == "" {
		add("s3.parameters.bucket: must not be empty")
	}
	for i, d := range c.S3.ReplayDrivers {
		if d == "" {
			add("s3.replayDrivers[%d]: must not be empty", i)
		}
	}
	if c.S3.BridgeAfter.Duration < 0 {
		add("s3.bridgeAfter: must not be negative, got %s", c.S3.BridgeAfter.Duration)
	}
	if c.S3.DriverDownBridgeAfter.Duration < 0 {
		add("s3.driverDownBridgeAfter: must not be negative, got %s", c.S3.DriverDownBridgeAfter.Duration)
	}
	if c.S3.BridgeFlapLimit < 0 {
		add("s3.bridgeFlapLimit: must not be negative (0: no limit), got %d", c.S3.BridgeFlapLimit)
	}
	if c.S3.BridgeFlapLimit > 0 && c.S3.BridgeFlapWindow.Duration <= 0 {
		add("s3.bridgeFlapWindow: must be positive with s3.bridgeFlapLimit set, got %s", c.S3.BridgeFlapWindow.Duration)
	}
	if c.S3.BridgeDiskFreeMB < 1 {
		add("s3.bridgeDiskFreeMB: must be at least 1 (MB of node disk a bridge's s3fs leaves free), got %d", c.S3.BridgeDiskFreeMB)
	}
	bl := c.S3.BridgeLimits
	for _, l := range []struct {
		field string
		l     CgroupLimits
	}{{"s3.bridgeLimits.perBridge", bl.PerBridge}, {"s3.bridgeLimits.all", bl.All}} {
		if l.l.CPU.MilliValue() < 10 {
			add("%s.cpu: must be at least 10m, got %s", l.field, l.l.CPU.String())
		}
		if l.l.Memory.Value() < 32<<20 {
			add("%s.memory: must be at least 32Mi (s3fs and its buffers), got %s", l.field, l.l.Memory.String())
		}
	}
	if bl.PerBridge.CPU.Cmp(bl.All.CPU) > 0 || bl.PerBridge.Memory.Cmp(bl.All.Memory) > 0 {
		add("s3.bridgeLimits.perBridge: must not exceed s3.bridgeLimits.all (cgroup v1 refuses a child's CPU quota above its parent's), got %s/%s over %s/%s",
			bl.PerBridge.CPU.String(), bl.PerBridge.Memory.String(), bl.All.CPU.String(), bl.All.Memory.String())
	}
	if bl.WarnPercent < 1 || bl.WarnPercent > 100 {
		add("s3.bridgeLimits.warnPercent: must be within 1..100, got %d", bl.WarnPercent)
	}
	if p := c.S3.BridgeDiskFreePercent; p < 0 || p > 90 {
		add("s3.bridgeDiskFreePercent: must be within 0..90, got %d", p)
	}
	if c.S3.HungConditionAfter.Duration < 0 {
		add("s3.hungConditionAfter: must not be negative, got %s", c.S3.HungConditionAfter.Duration)
	}
	if a := c.S3.AbortHungAfter.Duration; a < 0 || (a > 0 && a < c.S3.StatfsTimeout.Duration) {
		add("s3.abortHungAfter: must be 0 (off) or at least s3.statfsTimeout (%s), got %s", c.S3.StatfsTimeout.Duration, a)
	}
	for _, d := range slices.Sorted(maps.Keys(c.S3.Profiles)) {
		if d == "" {
			add("s3.profiles: a driver name must not be empty")
			continue
		}
		for _, e := range c.S3.Profiles[d].validate(fmt.Sprintf("s3.profiles[%q]", d)) {
			add("%s", e)
		}
	}
	if c.S3.S3fsPath == "" {
		add("s3.s3fsPath: must not be empty")
	}
	if c.Helper.Image == "" {
		add("helper.image: must not be empty")
	}
	switch c.Helper.ImagePullPolicy {
	case "Always", "IfNotPresent", "Never":
	default:
		add("helper.imagePullPolicy: must be Always, IfNotPresent or Never, got %q", c.Helper.ImagePullPolicy)
	}
	if !strings.HasPrefix(c.Helper.MountPath, "/") {
		add("helper.mountPath: must be an absolute path, got %q", c.Helper.MountPath)
	}
	if c.Helper.RunAsUser < 1 {
		add("helper.runAsUser: must be a non-root user id (>= 1), got %d", c.Helper.RunAsUser)
	}
	problems = append(problems, c.Helper.Resources.problems("helper.resources")...)
	if !strings.HasPrefix(c.KubeletDir, "/") {
		add("kubeletDir: must be an absolute path, got %q", c.KubeletDir)
	}
	if !strings.HasPrefix(c.StateDir, "/") {
		add("stateDir: must be an absolute path, got %q", c.StateDir)
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w:\n  - %s", ErrInvalid, strings.Join(problems, "\n  - "))
	}
	return nil
}

// IsLocalClass reports whether name is a configured local block StorageClass.
func (c *Config) IsLocalClass(name string) bool {
	return slices.Contains(c.LocalBlock.StorageClasses, name)
}

// IsS3Driver reports whether name is a configured S3 CSI driver or provisioner.
func (c *Config) IsS3Driver(name string) bool { return slices.Contains(c.S3.Drivers, name) }

// Resource names the injected containers may be given.
var helperResourceNames = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}

func (r Resources) problems(field string) []string {
	var out []string
	check := func(kind string, l corev1.ResourceList) {
		for name, q := range l {
			if !slices.Contains(helperResourceNames, name) {
				out = append(out, fmt.Sprintf("%s.%s.%s: unsupported resource (cpu, memory or ephemeral-storage)", field, kind, name))
				continue
			}
			if q.Sign() <= 0 {
				out = append(out, fmt.Sprintf("%s.%s.%s: must be positive, got %s", field, kind, name, q.String()))
			}
		}
	}
	check("requests", r.Requests)
	check("limits", r.Limits)
	for name, req := range r.Requests {
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			out = append(out, fmt.Sprintf("%s.requests.%s: %s is above the limit %s", field, name, req.String(), lim.String()))
		}
	}
	// Map order is random; keep the message stable.
	sort.Strings(out)
	return out
}
