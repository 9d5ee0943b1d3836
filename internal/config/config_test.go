package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr []string // substrings of the error; empty means success
		check   func(t *testing.T, c *Config)
	}{
		{
			name: "minimal file keeps defaults",
			yaml: "apiVersion: pvrescue.io/v1alpha1\nkind: Config\n",
			check: func(t *testing.T, c *Config) {
				if c.LocalBlock.FakeDeviceSizeBytes != 512 || !c.IsLocalClass("local-ssd") {
					t.Errorf("defaults not kept: %+v", c.LocalBlock)
				}
			},
		},
		{
			name: "overrides",
			yaml: `apiVersion: pvrescue.io/v1alpha1
kind: Config
localBlock:
  storageClasses: [fast-local, local-nvme]
  resyncPeriod: 30s
s3:
  drivers: [my.s3.driver]
  mountPropagation: false
helper:
  image: registry.local/pvrescue:v1
`,
			check: func(t *testing.T, c *Config) {
				if !c.IsLocalClass("local-nvme") || c.IsLocalClass("local-ssd") {
					t.Errorf("storage classes: %v", c.LocalBlock.StorageClasses)
				}
				if c.LocalBlock.ResyncPeriod.Duration != 30*time.Second {
					t.Errorf("resync: %v", c.LocalBlock.ResyncPeriod)
				}
				if !c.IsS3Driver("my.s3.driver") || c.IsS3Driver("ru.yandex.s3.csi") {
					t.Errorf("drivers: %v", c.S3.Drivers)
				}
				if c.S3.MountPropagation || !c.S3.LivenessProbe {
					t.Errorf("s3 flags: %+v", c.S3)
				}
				if c.Helper.Image != "registry.local/pvrescue:v1" {
					t.Errorf("image: %q", c.Helper.Image)
				}
			},
		},
		{name: "wrong version", yaml: "apiVersion: pvrescue.io/v9\nkind: Config\n", wantErr: []string{"apiVersion: must be"}},
		{name: "missing kind", yaml: "apiVersion: pvrescue.io/v1alpha1\n", wantErr: []string{"kind: must be"}},
		{name: "unknown field", yaml: "apiVersion: pvrescue.io/v1alpha1\nkind: Config\nlocalBlok: {}\n", wantErr: []string{"decode", "localBlok"}},
		{name: "not yaml", yaml: "{{{", wantErr: []string{"decode"}},
		{
			name: "several problems at once",
			yaml: `apiVersion: pvrescue.io/v1alpha1
kind: Config
localBlock:
  fakeDeviceSizeBytes: 100
  storageClasses: ["Bad_Name"]
helper:
  imagePullPolicy: Sometimes
kubeletDir: relative/path
`,
			wantErr: []string{"fakeDeviceSizeBytes", "storageClasses[0]", "imagePullPolicy", "kubeletDir"},
		},
		{
			name:    "probe statfs timeout above probe timeout",
			yaml:    "apiVersion: pvrescue.io/v1alpha1\nkind: Config\ns3:\n  probe:\n    timeoutSeconds: 2\n    statfsTimeout: 5s\n",
			wantErr: []string{"s3.probe.statfsTimeout"},
		},
		{
			name:    "hung options",
			yaml:    "apiVersion: pvrescue.io/v1alpha1\nkind: Config\ns3:\n  hungConditionAfter: -1s\n  abortHungAfter: 1s\n",
			wantErr: []string{"s3.hungConditionAfter: must not be negative", "s3.abortHungAfter: must be 0 (off) or at least s3.statfsTimeout"},
		},
		{
			name:    "bridge waits and flap limit",
			yaml:    "apiVersion: pvrescue.io/v1alpha1\nkind: Config\ns3:\n  driverDownBridgeAfter: -1s\n  bridgeFlapLimit: -1\n",
			wantErr: []string{"s3.driverDownBridgeAfter: must not be negative", "s3.bridgeFlapLimit: must not be negative"},
		},
		{
			name:    "flap limit without a window",
			yaml:    "apiVersion: pvrescue.io/v1alpha1\nkind: Config\ns3:\n  bridgeFlapWindow: 0s\n",
			wantErr: []string{"s3.bridgeFlapWindow: must be positive"},
		},
		{
			name: "bridge waits: defaults (at once when the driver is down), and the wait before issue 34",
			yaml: "apiVersion: pvrescue.io/v1alpha1\nkind: Config\ns3:\n  driverDownBridgeAfter: 10s\n",
			check: func(t *testing.T, c *Config) {
				d := Default().S3
				if c.S3.DriverDownBridgeAfter.Duration != 10*time.Second || d.DriverDownBridgeAfter.Duration != 0 || d.BridgeAfter.Duration != 10*time.Second ||
					d.BridgeFlapLimit != 5 || d.BridgeFlapWindow.Duration != time.Minute {
					t.Errorf("driverDownBridgeAfter %s; defaults %+v", c.S3.DriverDownBridgeAfter.Duration, d)
				}
			},
		},
		{
			name:    "bridge disk limit below 1 MB",
			yaml:    "apiVersion: pvrescue.io/v1alpha1\nkind: Config\ns3:\n  bridgeDiskFreeMB: 0\n",
			wantErr: []string{"s3.bridgeDiskFreeMB: must be at least 1"},
		},
		{
			name: "bridge disk limit: default, and set",
			yaml: "apiVersion: pvrescue.io/v1alpha1\nkind: Config\ns3:\n  bridgeDiskFreeMB: 256\n",
			check: func(t *testing.T, c *Config) {
				if c.S3.BridgeDiskFreeMB != 256 || Default().S3.BridgeDiskFreeMB != 1024 {
					t.Errorf("bridgeDiskFreeMB %d (want 256), default %d (want 1024)", c.S3.BridgeDiskFreeMB, Default().S3.BridgeDiskFreeMB)
				}
			},
		},
		{
			name: "abortHungAfter set",
			yaml: "apiVersion: pvrescue.io/v1alpha1\nkind: Config\ns3:\n  abortHungAfter: 5m\n",
			check: func(t *testing.T, c *Config) {
				if c.S3.AbortHungAfter.Duration != 5*time.Minute || c.S3.HungConditionAfter.Duration != 30*time.Second {
					t.Errorf("abortHungAfter %s, hungConditionAfter %s", c.S3.AbortHungAfter.Duration, c.S3.HungConditionAfter.Duration)
				}
			},
		},
		{name: "empty local class list", yaml: "apiVersion: pvrescue.io/v1alpha1\nkind: Config\nlocalBlock:\n  storageClasses: []\n", wantErr: []string{"localBlock.storageClasses: must name at least one"}},
		{name: "bad local roots", yaml: "apiVersion: pvrescue.io/v1alpha1\nkind: Config\nlocalBlock:\n  pathRoots: [\"mnt/disks\"]\n  linkRoots: []\n", wantErr: []string{"localBlock.pathRoots[0]", "localBlock.linkRoots: must name"}},
		{name: "bad duration", yaml: "apiVersion: pvrescue.io/v1alpha1\nkind: Config\nlocalBlock:\n  resyncPeriod: soon\n", wantErr: []string{"decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				tt.check(t, c)
				return
			}
			if err == nil {
				t.Fatalf("expected error containing %q", tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	c, err := Load("")
	if err != nil || c.Kind != Kind {
		t.Fatalf("Load(\"\") = %v, %v", c, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "absent.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: want ErrNotExist, got %v", err)
	}
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte("apiVersion: pvrescue.io/v1alpha1\nkind: Config\nstateDir: /srv/pvrescue\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load(p)
	if err != nil || c.StateDir != "/srv/pvrescue" {
		t.Fatalf("Load(file) = %+v, %v", c, err)
	}
}

func TestHelperResourcesAndUser(t *testing.T) {
	const head = "apiVersion: pvrescue.io/v1alpha1\nkind: Config\n"
	tests := []struct {
		name    string
		yaml    string
		wantErr []string
		check   func(t *testing.T, c *Config)
	}{
		{
			name: "defaults: small requests and limits of cpu and memory, user 65532",
			yaml: head,
			check: func(t *testing.T, c *Config) {
				r := c.Helper.Resources
				if r.Requests.Cpu().String() != "10m" || r.Requests.Memory().String() != "16Mi" ||
					r.Limits.Cpu().String() != "100m" || r.Limits.Memory().String() != "64Mi" {
					t.Errorf("resources = %+v", r)
				}
				if c.Helper.RunAsUser != 65532 {
					t.Errorf("runAsUser = %d", c.Helper.RunAsUser)
				}
			},
		},
		{
			name: "keys merge over the defaults",
			yaml: head + "helper:\n  runAsUser: 1001\n  resources:\n    limits: {memory: 128Mi, ephemeral-storage: 10Mi}\n",
			check: func(t *testing.T, c *Config) {
				l := c.Helper.Resources.Limits
				if l.Memory().String() != "128Mi" || l.Cpu().String() != "100m" || l.StorageEphemeral().String() != "10Mi" {
					t.Errorf("limits = %v", l)
				}
				if c.Helper.RunAsUser != 1001 {
					t.Errorf("runAsUser = %d", c.Helper.RunAsUser)
				}
			},
		},
		{name: "root user", yaml: head + "helper:\n  runAsUser: 0\n", wantErr: []string{"helper.runAsUser"}},
		{name: "negative user", yaml: head + "helper:\n  runAsUser: -5\n", wantErr: []string{"helper.runAsUser"}},
		{name: "request above limit", yaml: head + "helper:\n  resources:\n    requests: {cpu: 200m}\n", wantErr: []string{"helper.resources.requests.cpu: 200m is above the limit 100m"}},
		{name: "zero quantity", yaml: head + "helper:\n  resources:\n    limits: {memory: \"0\"}\n", wantErr: []string{"helper.resources.limits.memory: must be positive"}},
		{name: "unknown resource", yaml: head + "helper:\n  resources:\n    limits: {nvidia.com/gpu: 1}\n", wantErr: []string{"helper.resources.limits.nvidia.com/gpu: unsupported"}},
		{name: "not a quantity", yaml: head + "helper:\n  resources:\n    limits: {cpu: lots}\n", wantErr: []string{"decode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				tt.check(t, c)
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("want ErrInvalid, got %v", err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

// Parsing a file must not change the defaults other configurations start from.
func TestDefaultResourcesNotShared(t *testing.T) {
	if _, err := Parse([]byte("apiVersion: pvrescue.io/v1alpha1\nkind: Config\nhelper:\n  resources:\n    limits: {memory: 1Gi}\n")); err != nil {
		t.Fatal(err)
	}
	if got := Default().Helper.Resources.Limits.Memory().String(); got != "64Mi" {
		t.Errorf("default memory limit became %s", got)
	}
	req := Default().Helper.Resources.Requirements()
	req.Limits[corev1.ResourceCPU] = resource.MustParse("1")
	if got := Default().Helper.Resources.Limits.Cpu().String(); got != "100m" {
		t.Errorf("Requirements shares its maps: default cpu limit became %s", got)
	}
}

func TestS3Profiles(t *testing.T) {
	const head = "apiVersion: pvrescue.io/v1alpha1\nkind: Config\ns3:\n  profiles:\n"
	good := "    example.com/s3:\n      fuseType: fuse.s3fs\n      bucketAttribute: bucketName\n      subdir: data\n      usePrefixAttribute: flat\n      mounterAttribute: fuseProgram\n      s3fsMounters: [s3fs, s3fs-fuse]\n"
	tests := []struct {
		name    string
		profile string
		wantErr string
	}{
		{"a new driver, built-ins kept", good, ""},
		{"a built-in replaced", "    ru.yandex.s3.csi:\n      fuseType: fuse.s3fs\n      mounterAttribute: mounter\n      s3fsMounters: [s3fs]\n", ""},
		{"unknown field", "    example.com/s3:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n      extra: 1\n", "extra"},
		{"fuse type not fuse", "    d:\n      fuseType: ext4\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n", "fuseType"},
		{"no mounter attribute", "    d:\n      fuseType: fuse.s3fs\n      s3fsMounters: [s3fs]\n", "mounterAttribute"},
		{"no s3fs spelling", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n", "s3fsMounters"},
		{"subdir climbs", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n      subdir: ../up\n", "subdir"},
		{"subdir with a comma", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n      subdir: a,use_cache=/\n", "subdir"},
		{"usePrefix without subdir", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n      usePrefixAttribute: p\n", "usePrefixAttribute"},
		{"mounter value with a flag", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [\"-o x\"]\n", "s3fsMounters[0]"},
		{"geesefs left to the driver", "    ru.yandex.s3.csi:\n      fuseType: fuse.s3fs\n      mounterAttribute: mounter\n      s3fsMounters: [s3fs]\n      mounters:\n        geesefs: {program: geesefs, fuseType: fuse.geesefs, bridge: none}\n", ""},
		{"unknown program", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n      mounters:\n        goofys: {program: goofys, fuseType: fuse.goofys, bridge: s3fs}\n", `mounters["goofys"].program`},
		{"unknown bridge", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n      mounters:\n        rclone: {program: rclone, fuseType: fuse.rclone, bridge: rclone}\n", `mounters["rclone"].bridge`},
		{"mounter type not fuse", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n      mounters:\n        rclone: {program: rclone, fuseType: nfs, bridge: s3fs}\n", `mounters["rclone"].fuseType`},
		{"a value meaning two programs", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n      mounters:\n        s3fs: {program: rclone, fuseType: fuse.rclone, bridge: s3fs}\n", `mounters["s3fs"]: also in s3fsMounters`},
		{"mounter value with a flag", "    d:\n      fuseType: fuse.s3fs\n      mounterAttribute: m\n      s3fsMounters: [s3fs]\n      mounters:\n        \"-o x\": {program: rclone, fuseType: fuse.rclone, bridge: s3fs}\n", "is not a program name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(head + tt.profile))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{"ru.yandex.s3.csi", "ch.ctrox.csi.s3-driver"} {
				if _, ok := c.S3.Profiles[d]; !ok {
					t.Errorf("built-in profile %s lost", d)
				}
			}
		})
	}
	c, err := Parse([]byte(head + good))
	if err != nil {
		t.Fatal(err)
	}
	want := S3Profile{FUSEType: "fuse.s3fs", BucketAttribute: "bucketName", Subdir: "data", UsePrefixAttribute: "flat",
		MounterAttribute: "fuseProgram", S3fsMounters: []string{"s3fs", "s3fs-fuse"}}
	if got := c.S3.Profile("example.com/s3"); !reflect.DeepEqual(got, want) {
		t.Errorf("profile %+v, want %+v", got, want)
	}
	if got := c.S3.Profile("csi-s3"); !reflect.DeepEqual(got, GenericS3Profile()) {
		t.Errorf("driver without a profile: %+v, want the generic one", got)
	}
	if got := Default().S3.Profile("ch.ctrox.csi.s3-driver"); got.Subdir != "csi-fs" || got.UsePrefixAttribute != "usePrefix" {
		t.Errorf("built-in ctrox profile %+v", got)
	}
}

// Which program a volume runs, and how the agent bridges it, per the built-in profiles.
func TestS3ProfileMounter(t *testing.T) {
	yandex, ctrox := Default().S3.Profile("ru.yandex.s3.csi"), Default().S3.Profile("ch.ctrox.csi.s3-driver")
	tests := []struct {
		name      string
		prof      S3Profile
		attrs     map[string]string
		value     string
		want      S3Mounter
		wantKnown bool
	}{
		{"yandex s3fs", yandex, map[string]string{"mounter": "s3fs"}, "s3fs", S3Mounter{Program: "s3fs", FUSEType: "fuse.s3fs", Bridge: BridgeS3fs}, true},
		{"yandex default is geesefs", yandex, nil, "geesefs", S3Mounter{Program: ProgramGeesefs, FUSEType: "fuse.geesefs", Bridge: BridgeS3fs}, true},
		{"yandex rclone", yandex, map[string]string{"mounter": "rclone"}, "rclone", S3Mounter{Program: ProgramRclone, FUSEType: "fuse.rclone", Bridge: BridgeS3fs}, true},
		{"yandex unknown program", yandex, map[string]string{"mounter": "goofys"}, "goofys", S3Mounter{}, false},
		{"ctrox without attribute: default not assumed", ctrox, nil, "", S3Mounter{}, false},
		{"ctrox rclone not assumed", ctrox, map[string]string{"mounter": "rclone"}, "rclone", S3Mounter{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			value, m, known := tt.prof.Mounter(tt.attrs)
			if value != tt.value || m != tt.want || known != tt.wantKnown {
				t.Errorf("Mounter(%v) = %q %+v %v, want %q %+v %v", tt.attrs, value, m, known, tt.value, tt.want, tt.wantKnown)
			}
		})
	}
	for attrs, want := range map[string]string{"s3fs": "fuse.s3fs", "geesefs": "fuse.geesefs", "": "fuse.geesefs", "rclone": "fuse.rclone", "goofys": "fuse.s3fs"} {
		if got := yandex.FUSETypeOf(map[string]string{"mounter": attrs}); got != want {
			t.Errorf("FUSETypeOf(mounter %q) = %q, want %q", attrs, got, want)
		}
	}
	if got, want := yandex.BridgedFUSETypes(), []string{"fuse.geesefs", "fuse.rclone", "fuse.s3fs"}; !reflect.DeepEqual(got, want) {
		t.Errorf("yandex bridges %v, want %v", got, want)
	}
	yandex.Mounters = map[string]S3Mounter{"rclone": {Program: ProgramRclone, FUSEType: "fuse.rclone", Bridge: BridgeNone}}
	if got, want := yandex.BridgedFUSETypes(), []string{"fuse.s3fs"}; !reflect.DeepEqual(got, want) {
		t.Errorf("with rclone bridged by none: bridges %v, want %v", got, want)
	}
}

// The helper's quantities keep their text, default or parsed: encoding them (each admission
// does) then allocates nothing.
func TestHelperQuantitiesKeepText(t *testing.T) {
	parsed, err := Parse([]byte("apiVersion: " + APIVersion + "\nkind: " + Kind + "\nhelper:\n  resources:\n    limits: {memory: 96Mi, ephemeral-storage: 10Mi}\n    requests: {memory: 20Mi}\n"))
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*Config{"default": Default(), "parsed": parsed} {
		for _, l := range []corev1.ResourceList{cfg.Helper.Resources.Requests, cfg.Helper.Resources.Limits} {
			for res, q := range l {
				if n := testing.AllocsPerRun(10, func() { c := q; _ = c.String() }); n != 0 {
					t.Errorf("%s %s %s: %v allocations to get its text, want 0", name, res, q.String(), n)
				}
			}
		}
	}
}
