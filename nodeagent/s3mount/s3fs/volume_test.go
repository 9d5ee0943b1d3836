package s3fs

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

func TestParseOptions(t *testing.T) {
	tests := []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{"-o allow_other -o umask=000,uid=1000", []string{"allow_other", "umask=000", "uid=1000"}, false},
		{"-oretries=1", []string{"retries=1"}, false},
		{"--memory-limit 1000", nil, true}, // geesefs style: not s3fs
		{"-o url=http://evil", nil, true},
		{"-o retries=1,use_cache=/", nil, true},
		{"-o umask=000,uid=1000x", nil, true},
		{"-o passwd_file=/etc/shadow", nil, true},
		{"-o", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseOptions(tt.in)
		if (err != nil) != tt.wantErr || (err != nil && !errors.Is(err, ErrBadOptions)) {
			t.Errorf("ParseOptions(%q) err = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if d := cmp.Diff(tt.want, got); d != "" {
			t.Errorf("ParseOptions(%q) (-want +got):\n%s", tt.in, d)
		}
	}
}

// pvFixture is a yandex PV; "mounter: s3fs" is set unless attrs name a mounter.
func pvFixture(handle string, attrs map[string]string, ref *corev1.SecretReference) *corev1.PersistentVolume {
	a := map[string]string{"mounter": "s3fs"}
	for k, v := range attrs {
		a[k] = v
	}
	attrs = a
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "pv-a"},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName: "s3",
			ClaimRef:         &corev1.ObjectReference{Namespace: "team", Name: "data"},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: "ru.yandex.s3.csi", VolumeHandle: handle, VolumeAttributes: attrs, NodePublishSecretRef: ref}},
		},
	}
}

func TestResolveVolume(t *testing.T) {
	p := config.Default().S3.Parameters
	ref := &corev1.SecretReference{Name: "s", Namespace: "ns"}
	tests := []struct {
		name    string
		pv      *corev1.PersistentVolume
		want    Volume
		wantErr error
	}{
		{
			name: "handle bucket/prefix, secret from PV",
			pv:   pvFixture("bkt/pvc-1", map[string]string{"mounter": "s3fs"}, ref),
			want: Volume{PV: "pv-a", Driver: "ru.yandex.s3.csi", Mounter: "s3fs", Handle: "bkt/pvc-1", Bucket: "bkt", Prefix: "pvc-1", SecretRef: ref},
		},
		{
			name: "bucket only handle, endpoint, region and options from attributes",
			pv:   pvFixture("bkt", map[string]string{"endpoint": "http://s3:9000", "region": "eu", "options": "-o retries=2"}, ref),
			want: Volume{PV: "pv-a", Driver: "ru.yandex.s3.csi", Mounter: "s3fs", Handle: "bkt", Bucket: "bkt", Endpoint: "http://s3:9000", Region: "eu",
				Options: []string{"retries=2"}, SecretRef: ref},
		},
		{
			name: "bucket attribute with handle bucket/prefix",
			pv:   pvFixture("shared/pvc-2", map[string]string{"bucket": "shared", "endpoint": "http://attr"}, ref),
			want: Volume{PV: "pv-a", Driver: "ru.yandex.s3.csi", Mounter: "s3fs", Handle: "shared/pvc-2", Bucket: "shared", Prefix: "pvc-2", Endpoint: "http://attr", SecretRef: ref},
		},
		{
			name: "explicit prefix attribute",
			pv:   pvFixture("opaque-id", map[string]string{"bucket": "bbb", "prefix": "/some/dir/"}, ref),
			want: Volume{PV: "pv-a", Driver: "ru.yandex.s3.csi", Mounter: "s3fs", Handle: "opaque-id", Bucket: "bbb", Prefix: "some/dir", SecretRef: ref},
		},
		{
			name: "geesefs mounter: bridged by s3fs, geesefs's default modes",
			pv:   pvFixture("bbb/g", map[string]string{"mounter": "geesefs"}, ref),
			want: Volume{PV: "pv-a", Driver: "ru.yandex.s3.csi", Mounter: "geesefs", Handle: "bbb/g", Bucket: "bbb", Prefix: "g",
				Options: []string{"umask=0022"}, SecretRef: ref},
		},
		{
			name: "geesefs options mapped: tuning dropped, owner and modes kept",
			pv: pvFixture("bbb/g", map[string]string{"mounter": "geesefs",
				"options": "--memory-limit 1000 --dir-mode 0777 --file-mode 0666 --uid=1000 -o allow_other"}, ref),
			want: Volume{PV: "pv-a", Driver: "ru.yandex.s3.csi", Mounter: "geesefs", Handle: "bbb/g", Bucket: "bbb", Prefix: "g",
				Options: []string{"uid=1000", "allow_other", "umask=0000"}, SecretRef: ref},
		},
		{
			name: "rclone mounter: bridged by s3fs, its umask and read-only kept",
			pv:   pvFixture("bbb/r", map[string]string{"mounter": "rclone", "options": "--vfs-cache-mode full --umask 0027 --read-only"}, ref),
			want: Volume{PV: "pv-a", Driver: "ru.yandex.s3.csi", Mounter: "rclone", Handle: "bbb/r", Bucket: "bbb", Prefix: "r",
				Options: []string{"umask=0027", "ro"}, SecretRef: ref},
		},
		{
			name: "yandex without mounter attribute runs geesefs",
			pv: func() *corev1.PersistentVolume {
				pv := pvFixture("bbb", nil, ref)
				delete(pv.Spec.CSI.VolumeAttributes, "mounter")
				return pv
			}(),
			want: Volume{PV: "pv-a", Driver: "ru.yandex.s3.csi", Mounter: "geesefs", Handle: "bbb", Bucket: "bbb", Options: []string{"umask=0022"}, SecretRef: ref},
		},
		{name: "geesefs flag touching the node's disk", pv: pvFixture("bbb", map[string]string{"mounter": "geesefs", "options": "--cache /tmp/x"}, ref), wantErr: ErrCannotReproduce},
		{name: "a mounter the profile does not know", pv: pvFixture("bbb", map[string]string{"mounter": "goofys"}, ref), wantErr: ErrCannotReproduce},
		{name: "ctrox mounts <prefix>/csi-fs", pv: func() *corev1.PersistentVolume {
			pv := pvFixture("bbb/pvc-3", nil, ref)
			pv.Spec.CSI.Driver = "ch.ctrox.csi.s3-driver"
			return pv
		}(), want: Volume{PV: "pv-a", Driver: "ch.ctrox.csi.s3-driver", Mounter: "s3fs", Handle: "bbb/pvc-3", Bucket: "bbb", Prefix: "pvc-3/csi-fs", SecretRef: ref}},
		{name: "ctrox with usePrefix mounts the prefix itself", pv: func() *corev1.PersistentVolume {
			pv := pvFixture("bbb/pvc-3", map[string]string{"usePrefix": "true"}, ref)
			pv.Spec.CSI.Driver = "ch.ctrox.csi.s3-driver"
			return pv
		}(), want: Volume{PV: "pv-a", Driver: "ch.ctrox.csi.s3-driver", Mounter: "s3fs", Handle: "bbb/pvc-3", Bucket: "bbb", Prefix: "pvc-3", SecretRef: ref}},
		{name: "ctrox without mounter attribute", pv: func() *corev1.PersistentVolume {
			pv := pvFixture("bbb", nil, ref)
			pv.Spec.CSI.Driver = "ch.ctrox.csi.s3-driver"
			delete(pv.Spec.CSI.VolumeAttributes, "mounter")
			return pv
		}(), wantErr: ErrCannotReproduce},
		{name: "no secret on the PV", pv: pvFixture("bbb", nil, nil), wantErr: ErrNoSecretRef},
		{name: "empty handle", pv: pvFixture("", nil, ref), wantErr: ErrNoBucket},
		{name: "bad options", pv: pvFixture("bbb", map[string]string{"options": "--dir-mode 0777"}, ref), wantErr: ErrBadOptions},
		{name: "bucket reads as a flag", pv: pvFixture("-opasswd_file=/etc/shadow", nil, ref), wantErr: ErrUnsafe},
		{name: "comma in endpoint attribute", pv: pvFixture("bbb", map[string]string{"endpoint": "http://h,passwd_file=/x"}, ref), wantErr: ErrUnsafe},
		{name: "comma in region attribute", pv: pvFixture("bbb", map[string]string{"region": "eu,use_cache=/"}, ref), wantErr: ErrUnsafe},
		{name: "prefix climbs", pv: pvFixture("bbb/../x", nil, ref), wantErr: ErrUnsafe},
		{name: "not CSI", pv: &corev1.PersistentVolume{}, wantErr: ErrNotS3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ResolveVolume(tt.pv, p, profileOf(tt.pv))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

// TestCredentialsRef: only the PV's own references, as kubelet passes them; nothing from the
// StorageClass (its parameters, templates or provisioner secret are never read).
func TestCredentialsRef(t *testing.T) {
	stage := &corev1.SecretReference{Name: "stage", Namespace: "ns"}
	publish := &corev1.SecretReference{Name: "publish", Namespace: "ns"}
	tests := []struct {
		name           string
		stage, publish *corev1.SecretReference
		want           *corev1.SecretReference
		wantErr        error
	}{
		{name: "publish only", publish: publish, want: publish},
		{name: "stage only", stage: stage, want: stage},
		{name: "both: the stage secret (the call that starts the FUSE program of a staging driver)", stage: stage, publish: publish, want: stage},
		{name: "empty stage name falls to publish", stage: &corev1.SecretReference{Namespace: "ns"}, publish: publish, want: publish},
		{name: "neither", wantErr: ErrNoSecretRef},
		{name: "no namespace", publish: &corev1.SecretReference{Name: "x"}, wantErr: ErrNoSecretRef},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pv := pvFixture("bbb", nil, tt.publish)
			pv.Spec.CSI.NodeStageSecretRef = tt.stage
			// A StorageClass naming secrets must not matter: CredentialsRef never sees one.
			got, err := CredentialsRef(pv)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestAllowlists(t *testing.T) {
	for _, tt := range []struct {
		what  string
		check func(string) error
		ok    []string
		bad   []string
	}{
		{"bucket", CheckBucket, []string{"bkt", "my.bucket-1", "e2e-bucket"},
			[]string{"", "ab", "-oallow_other", "Bucket", "a..b", "192.168.1.1", "b,c", "b c", "bucket-", strings.Repeat("a", 64)}},
		{"prefix", CheckPrefix, []string{"", "pvc-1", "some/dir", "a/csi-fs"},
			[]string{"..", "a/../b", "a//b", "a,b", "a b", "-o", "/abs"}},
		{"endpoint", CheckEndpoint, []string{"", "http://127.0.0.1:7070", "https://storage.yandexcloud.net", "http://s3.local:9000/", "http://[::1]:9000"},
			[]string{"http://h,passwd_file=/x", "ftp://h", "http://u:p@h", "http://h?x=1", "http://h#f", "h:9000", "http://", "http://h x", "http://h/a,b"}},
		{"region", CheckRegion, []string{"", "us-east-1", "ru-central1"}, []string{"eu,use_cache=/", "EU", "eu west", "-o"}},
		{"option", CheckOption, []string{"retries=2", "allow_other", "umask=0022", "uid=1000", "storage_class=standard", "dbglevel=info"},
			[]string{"passwd_file=/etc/shadow", "url=http://x", "use_cache=/", "tmpdir=/", "retries=2x", "uid=-1", "ro=1", "umask=999", "storage_class=a,b", "nonexistent"}},
	} {
		for _, v := range tt.ok {
			if err := tt.check(v); err != nil {
				t.Errorf("%s %q refused: %v", tt.what, v, err)
			}
		}
		for _, v := range tt.bad {
			if err := tt.check(v); !errors.Is(err, ErrUnsafe) {
				t.Errorf("%s %q: err = %v, want ErrUnsafe", tt.what, v, err)
			}
		}
	}
}

func TestReadOnlyPV(t *testing.T) {
	pv := pvFixture("bbb", nil, &corev1.SecretReference{Name: "s", Namespace: "ns"})
	pv.Spec.MountOptions = []string{"ro"}
	v, err := ResolveVolume(pv, config.Default().S3.Parameters, profileOf(pv))
	if err != nil || !v.ReadOnly {
		t.Errorf("ro mount option: ReadOnly=%v err=%v", v.ReadOnly, err)
	}
}

func TestParseCredentials(t *testing.T) {
	keys := config.Default().S3.SecretKeys
	secret := func(data map[string]string) *corev1.Secret {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "n"}, Data: map[string][]byte{}}
		for k, v := range data {
			s.Data[k] = []byte(v)
		}
		return s
	}
	c, err := ParseCredentials(secret(map[string]string{"accessKeyID": "AK", "secretAccessKey": "SK\n", "endpoint": "http://e"}), keys)
	if err != nil || c.AccessKeyID != "AK" || c.SecretAccessKey != "SK" || c.Endpoint != "http://e" {
		t.Fatalf("ParseCredentials = %+v, %v", c, err)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", c, c, c, c); strings.Contains(s, "SK") || strings.Contains(s, "AK") {
		t.Errorf("credentials printed: %s", s)
	}
	if got := string(PasswdContent(c)); got != "AK:SK\n" {
		t.Errorf("passwd content %q", got)
	}
	for name, data := range map[string]map[string]string{
		"no keys":       {"endpoint": "x"},
		"empty secret":  {"accessKeyID": "AK", "secretAccessKey": ""},
		"colon in AK":   {"accessKeyID": "A:K", "secretAccessKey": "SK"},
		"newline in SK": {"accessKeyID": "AK", "secretAccessKey": "S\nK"},
	} {
		_, err := ParseCredentials(secret(data), keys)
		if !errors.Is(err, ErrSecretKeyMissing) {
			t.Errorf("%s: err = %v, want ErrSecretKeyMissing", name, err)
			continue
		}
		if strings.Contains(err.Error(), "SK") && !strings.Contains(err.Error(), "secretAccessKey") {
			t.Errorf("%s: error leaks a value: %v", name, err)
		}
	}
}

// The bridge's free-space floor: a volume's ensure_diskfree may raise it, never lower it (on the
// command line it comes last: s3fs takes an option's last value), and it follows the filesystem's
// size (s3.bridgeDiskFreePercent, above kubelet's eviction threshold).
func TestDiskFreeFloor(t *testing.T) {
	last := func(args []string) string {
		for i := len(args) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(args[i], "ensure_diskfree="); ok {
				return v
			}
		}
		return ""
	}
	for _, tc := range []struct {
		opts []string
		want string
	}{
		{nil, "2048"},
		{[]string{"ensure_diskfree=1"}, "2048"},
		{[]string{"retries=2", "ensure_diskfree=0"}, "2048"},
		{[]string{"ensure_diskfree=4096"}, "4096"},
	} {
		v := Volume{PV: "pv-a", Bucket: "bkt", Options: tc.opts}
		got, err := Args(v, Credentials{AccessKeyID: "AK", SecretAccessKey: "SK"}, "/st/pv-a", "/cr/pv-a.passwd", "/tmp/pv-a", 2048)
		if err != nil {
			t.Fatal(err)
		}
		if l := last(got); l != tc.want {
			t.Errorf("options %v: s3fs takes ensure_diskfree=%s, want %s (args %v)", tc.opts, l, tc.want, got)
		}
	}
	cfg := config.Default() // 1024 MB, 15%
	for _, tc := range []struct {
		fs   int64
		want int64
	}{
		{0, 1024},          // size unknown: the configured MB
		{4 << 30, 1024},    // 15% of 4 GiB is 615 MB: the configured 1024 stays
		{100 << 30, 15360}, // 15% of 100 GiB
		{1 << 40, 157287},  // 15% of 1 TiB, above kubelet's 10% hard eviction
	} {
		if got := DiskFreeFloorMB(cfg, tc.fs); got != tc.want {
			t.Errorf("DiskFreeFloorMB(%d bytes) = %d, want %d", tc.fs, got, tc.want)
		}
	}
}

// Below the floor s3fs refuses to start ("no enough disk space") unless floor + its start-up
// need (multipart_size × parallel_count MB) is free; seen on a 252 GB disk with 36.9 GB free to
// processes against a 15% floor of 37.8 GB: every bridge of the node failed. The floor is then
// lowered to what lets it start, never raised, and only by what the start needs.
func TestStartableFloorMB(t *testing.T) {
	for _, tc := range []struct {
		name        string
		floor       int64
		avail       int64
		opts        []string
		want        int64
		wantLowered bool
	}{
		{"plenty free", 1024, 50000, nil, 1024, false},
		{"unknown free", 37800, -1, nil, 37800, false},
		{"just enough: floor + 50 + margin", 1000, 1066, nil, 1000, false},
		{"one MB short", 1000, 1065, nil, 999, true},
		{"the CI disk", 38706, 37814, nil, 37748, true},
		{"the volume's multipart buffers count", 1000, 2000, []string{"multipart_size=64", "parallel_count=20"}, 704, true},
		{"bad values keep the defaults", 1000, 1065, []string{"multipart_size=x", "parallel_count=0"}, 999, true},
		{"nothing free: s3fs will say so", 1000, 30, nil, 1, true},
	} {
		got, lowered := StartableFloorMB(tc.floor, tc.avail, tc.opts)
		if got != tc.want || lowered != tc.wantLowered {
			t.Errorf("%s: StartableFloorMB(%d, %d, %v) = %d, %v; want %d, %v", tc.name, tc.floor, tc.avail, tc.opts, got, lowered, tc.want, tc.wantLowered)
		}
		if got > tc.floor {
			t.Errorf("%s: the floor was raised: %d > %d", tc.name, got, tc.floor)
		}
		if lowered && got > 1 && got+startNeedMB(tc.opts) > tc.avail {
			t.Errorf("%s: floor %d + start need %d > %d free: s3fs would still refuse", tc.name, got, startNeedMB(tc.opts), tc.avail)
		}
	}
}

func TestArgs(t *testing.T) {
	v := Volume{PV: "pv-a", Bucket: "bkt", Prefix: "p/q", Endpoint: "http://sc", Region: "eu", Options: []string{"retries=2"}}
	got, err := Args(v, Credentials{AccessKeyID: "AK", SecretAccessKey: "SK", Endpoint: "http://secret"}, "/st/pv-a", "/cr/pv-a.passwd", "/tmp/pv-a", 512)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"bkt:/p/q", "/st/pv-a", "-f", "-o", "passwd_file=/cr/pv-a.passwd", "-o", "fsname=pvrescue-s3:pv-a",
		"-o", "use_path_request_style", "-o", "allow_other", "-o", "nosuid", "-o", "nodev", "-o", "tmpdir=/tmp/pv-a",
		"-o", "url=http://secret", "-o", "endpoint=eu", "-o", "retries=2", "-o", "ensure_diskfree=512"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	for _, a := range got {
		if strings.Contains(a, "SK") {
			t.Errorf("secret on the command line: %q", a)
		}
	}
	// Injection through the Secret's endpoint or region is refused: no command line at all.
	for _, c := range []Credentials{
		{AccessKeyID: "AK", SecretAccessKey: "SK", Endpoint: "http://h,passwd_file=/etc/shadow"},
		{AccessKeyID: "AK", SecretAccessKey: "SK", Region: "eu,use_cache=/"},
	} {
		if args, err := Args(v, c, "/st", "/pw", "/tmp", 512); !errors.Is(err, ErrUnsafe) || args != nil {
			t.Errorf("S3fsArgs with %+v = %v, %v; want ErrUnsafe and no args", c, args, err)
		}
	}
	if _, err := Args(Volume{PV: "x", Bucket: "-ourl=http://evil"}, Credentials{}, "/st", "/pw", "/tmp", 512); !errors.Is(err, ErrUnsafe) {
		t.Errorf("bucket flag accepted: %v", err)
	}
}

// A read-only volume's bridge is read-only in s3fs itself (-o ro, once, even when the PV's mount
// options say ro too); a writable one never gets ro. The temp space bound is always given.
func TestArgsReadOnlyAndDiskFree(t *testing.T) {
	for _, tc := range []struct {
		name     string
		v        Volume
		diskFree int64
		wantRO   int
		wantFree string
	}{
		{"writable", Volume{PV: "pv", Bucket: "bkt"}, 1024, 0, "ensure_diskfree=1024"},
		{"read-only PV", Volume{PV: "pv", Bucket: "bkt", ReadOnly: true}, 1024, 1, "ensure_diskfree=1024"},
		{"read-only by mount option", Volume{PV: "pv", Bucket: "bkt", ReadOnly: true, Options: []string{"ro"}}, 64, 1, "ensure_diskfree=64"},
		{"no limit given: at least 1 MB", Volume{PV: "pv", Bucket: "bkt"}, 0, 0, "ensure_diskfree=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args, err := Args(tc.v, Credentials{AccessKeyID: "AK", SecretAccessKey: "SK", Endpoint: "http://h"}, "/st", "/pw", "/tmp", tc.diskFree)
			if err != nil {
				t.Fatal(err)
			}
			ro, free := 0, 0
			for i := 1; i < len(args); i++ {
				if args[i-1] != "-o" {
					continue
				}
				if args[i] == "ro" {
					ro++
				}
				if args[i] == tc.wantFree {
					free++
				}
			}
			if ro != tc.wantRO || free != 1 {
				t.Errorf("args %q: -o ro %d times (want %d), %s %d times (want 1)", args, ro, tc.wantRO, tc.wantFree, free)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	l := Layout{StateDir: "/var/lib/pvrescue"}
	if pv, ok := l.PVFromMountPoint(l.MountPoint("pv-a")); !ok || pv != "pv-a" {
		t.Errorf("PVFromMountPoint(MountPoint) = %q %v", pv, ok)
	}
	for _, p := range []string{"/var/lib/pvrescue/s3/staging", "/var/lib/pvrescue/s3/staging/pv-a/x", "/other/pv-a"} {
		if _, ok := l.PVFromMountPoint(p); ok {
			t.Errorf("PVFromMountPoint accepted %q", p)
		}
	}
	if pv, ok := stack.PVFromFSName(stack.FSName("pv-a")); !ok || pv != "pv-a" {
		t.Errorf("PVFromFSName(FSName) = %q %v", pv, ok)
	}
	for _, s := range []string{"s3fs", "pvrescue-s3:", "/dev/vda"} {
		if _, ok := stack.PVFromFSName(s); ok {
			t.Errorf("PVFromFSName accepted %q", s)
		}
	}
}

// profileOf is the built-in profile of pv's driver.
func profileOf(pv *corev1.PersistentVolume) config.S3Profile {
	if pv.Spec.CSI == nil {
		return config.GenericS3Profile()
	}
	return config.Default().S3.Profile(pv.Spec.CSI.Driver)
}

// A profile from the configuration: other attribute names, another subdirectory rule, another
// mounter attribute and s3fs spellings.
func TestResolveVolumeWithConfiguredProfile(t *testing.T) {
	prof := config.S3Profile{FUSEType: "fuse.s3fs", BucketAttribute: "bucketName", PrefixAttribute: "path",
		Subdir: "data", UsePrefixAttribute: "flat", MounterAttribute: "fuseProgram", DefaultMounter: "s3fs-fuse",
		S3fsMounters: []string{"s3fs", "s3fs-fuse"}}
	ref := &corev1.SecretReference{Name: "s", Namespace: "ns"}
	p := config.Default().S3.Parameters
	cases := []struct {
		name    string
		attrs   map[string]string
		handle  string
		bucket  string
		prefix  string
		wantErr error
	}{
		{"attributes by the profile's names, default mounter is s3fs", map[string]string{"bucketName": "bkt", "path": "team/a"}, "id-1", "bkt", "team/a/data", nil},
		{"flat: no subdir", map[string]string{"bucketName": "bkt", "path": "team/a", "flat": "true"}, "id-1", "bkt", "team/a", nil},
		{"s3fs by another spelling", map[string]string{"fuseProgram": "s3fs", "bucketName": "bkt"}, "id-1", "bkt", "data", nil},
		{"s3.parameters' names are not the profile's", map[string]string{"bucket": "other"}, "hbkt/p", "hbkt", "p/data", nil},
		{"another program", map[string]string{"fuseProgram": "rclone", "bucketName": "bkt"}, "id-1", "", "", ErrCannotReproduce},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pv := pvFixture(c.handle, nil, ref)
			pv.Spec.CSI.Driver = "example.com/s3"
			pv.Spec.CSI.VolumeAttributes = c.attrs
			v, err := ResolveVolume(pv, p, prof)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
			if err == nil && (v.Bucket != c.bucket || v.Prefix != c.prefix) {
				t.Errorf("bucket %q prefix %q, want %q %q", v.Bucket, v.Prefix, c.bucket, c.prefix)
			}
		})
	}
}

// A profile whose mounter is bridged with "none": reported, never served by s3fs.
func TestResolveVolumeMounterNotBridged(t *testing.T) {
	prof := config.Default().S3.Profile("ru.yandex.s3.csi")
	prof.Mounters = map[string]config.S3Mounter{"rclone": {Program: config.ProgramRclone, FUSEType: "fuse.rclone", Bridge: config.BridgeNone}}
	pv := pvFixture("bbb/r", map[string]string{"mounter": "rclone"}, &corev1.SecretReference{Name: "s", Namespace: "ns"})
	_, err := ResolveVolume(pv, config.Default().S3.Parameters, prof)
	if !errors.Is(err, ErrCannotReproduce) || !strings.Contains(err.Error(), `mounter "rclone"`) {
		t.Fatalf("err = %v, want CannotReproduce naming the mounter", err)
	}
}

// Each program's flags map to s3fs options, or leave the volume unbridged with the reason.
func TestMapOptions(t *testing.T) {
	tests := []struct {
		program, in string
		want        []string
		wantErr     error
	}{
		{"s3fs", "-o umask=000,uid=1000", []string{"umask=000", "uid=1000"}, nil},
		{"s3fs", "--memory-limit 1000", nil, ErrBadOptions},
		{config.ProgramGeesefs, "", []string{"umask=0022"}, nil},
		{config.ProgramGeesefs, "--memory-limit 1000 --max-flushers=4 --no-checksum --stat-cache-ttl 1m", []string{"umask=0022"}, nil},
		{config.ProgramGeesefs, "--uid 1000 --gid 2000", []string{"uid=1000", "gid=2000", "umask=0022"}, nil},
		{config.ProgramGeesefs, "--dir-mode 0750 --file-mode 0640", []string{"umask=0027"}, nil},
		{config.ProgramGeesefs, "--dir-mode 0777", []string{"umask=0000"}, nil},
		{config.ProgramGeesefs, "--file-mode 0666", nil, ErrCannotReproduce}, // files above the default dirs' 0755
		{config.ProgramGeesefs, "-o allow_other,ro", []string{"allow_other", "ro", "umask=0022"}, nil},
		{config.ProgramGeesefs, "-oro", []string{"ro", "umask=0022"}, nil},
		{config.ProgramGeesefs, "--cache /var/cache", nil, ErrCannotReproduce},
		{config.ProgramGeesefs, "--shared-config /root/.aws/config", nil, ErrCannotReproduce},
		{config.ProgramGeesefs, "--uid 0,allow_root", nil, ErrUnsafe},
		{config.ProgramGeesefs, "--memory-limit", nil, ErrBadOptions},
		{config.ProgramGeesefs, "bucket:prefix", nil, ErrBadOptions},
		{config.ProgramGeesefs, "-o passwd_file=/etc/shadow", nil, ErrUnsafe},
		{config.ProgramGeesefs, "--no-checksum=yes", nil, ErrUnsafe},
		{config.ProgramRclone, "--vfs-cache-mode=writes --allow-other --s3-provider AWS", []string{"umask=0022"}, nil},
		{config.ProgramRclone, "--umask 0002 --uid 1000 --read-only", []string{"umask=0002", "uid=1000", "ro"}, nil},
		{config.ProgramRclone, "--s3-endpoint http://evil", nil, ErrCannotReproduce},
		{config.ProgramRclone, "--config /etc/rclone.conf", nil, ErrCannotReproduce},
		{"goofys", "", nil, ErrCannotReproduce},
	}
	for _, tt := range tests {
		t.Run(tt.program+" "+tt.in, func(t *testing.T) {
			got, err := MapOptions(tt.program, tt.in)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
			for _, o := range got {
				if err := CheckOption(o); err != nil {
					t.Errorf("mapped option %q fails the s3fs allowlist: %v", o, err)
				}
			}
		})
	}
}
