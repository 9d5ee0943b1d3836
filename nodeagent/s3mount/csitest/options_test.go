package csitest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pvrescue/pvrescue/internal/mountinfo"
)

func TestMountArgs(t *testing.T) {
	tests := []struct {
		name    string
		layout  string
		handle  string
		attrs   map[string]string
		secrets map[string]string
		want    []string
		wantErr bool
	}{
		{
			name:   "bucket and prefix from the handle, endpoint from attributes",
			handle: "data/team", attrs: map[string]string{"endpoint": "http://h:7070"},
			want: []string{"data:/team", "/t", "-f", "-o", "passwd_file=/p", "-o", "url=http://h:7070", "-o", "use_path_request_style", "-o", "allow_other"},
		},
		{
			name:   "attributes win, secret endpoint overrides, extra options",
			handle: "ignored", attrs: map[string]string{"bucket": "b", "endpoint": "http://a", "options": "-o max_stat_cache_size=0 ro"},
			secrets: map[string]string{"endpoint": "http://s"},
			want:    []string{"b", "/t", "-f", "-o", "passwd_file=/p", "-o", "url=http://s", "-o", "use_path_request_style", "-o", "allow_other", "-o", "max_stat_cache_size=0", "-o", "ro"},
		},
		{
			name:   "ctrox layout mounts <prefix>/csi-fs",
			layout: LayoutCtrox, handle: "data/pvc-1", attrs: map[string]string{"endpoint": "http://h"},
			want: []string{"data:/pvc-1/csi-fs", "/t", "-f", "-o", "passwd_file=/p", "-o", "url=http://h", "-o", "use_path_request_style", "-o", "allow_other"},
		},
		{
			name:   "ctrox layout with usePrefix mounts the prefix",
			layout: LayoutCtrox, handle: "data/pvc-1", attrs: map[string]string{"endpoint": "http://h", "usePrefix": "true"},
			want: []string{"data:/pvc-1", "/t", "-f", "-o", "passwd_file=/p", "-o", "url=http://h", "-o", "use_path_request_style", "-o", "allow_other"},
		},
		{
			name:   "yandex layout mounts bucket[:/prefix] like direct",
			layout: LayoutYandex, handle: "data/pvc-1", attrs: map[string]string{"endpoint": "http://h"},
			want: []string{"data:/pvc-1", "/t", "-f", "-o", "passwd_file=/p", "-o", "url=http://h", "-o", "use_path_request_style", "-o", "allow_other"},
		},
		{
			name:   "mounter geesefs: s3fs under geesefs's mount type",
			layout: LayoutStrict, handle: "data/g", attrs: map[string]string{"endpoint": "http://h", "mounter": "geesefs"},
			want: []string{"data:/g", "/t", "-f", "-o", "passwd_file=/p", "-o", "url=http://h", "-o", "use_path_request_style", "-o", "allow_other", "-o", "subtype=geesefs"},
		},
		{
			name:   "mounter rclone: s3fs under rclone's mount type",
			layout: LayoutYandex, handle: "data/r", attrs: map[string]string{"endpoint": "http://h", "mounter": "rclone"},
			want: []string{"data:/r", "/t", "-f", "-o", "passwd_file=/p", "-o", "url=http://h", "-o", "use_path_request_style", "-o", "allow_other", "-o", "subtype=rclone"},
		},
		{
			name:   "mounter s3fs: no subtype",
			handle: "data/s", attrs: map[string]string{"endpoint": "http://h", "mounter": "s3fs"},
			want: []string{"data:/s", "/t", "-f", "-o", "passwd_file=/p", "-o", "url=http://h", "-o", "use_path_request_style", "-o", "allow_other"},
		},
		{name: "mounter smuggling an option", handle: "b", attrs: map[string]string{"endpoint": "http://h", "mounter": "x,allow_root"}, wantErr: true},
		{name: "no endpoint", handle: "b", wantErr: true},
		{name: "no bucket", handle: "", attrs: map[string]string{"endpoint": "http://a"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			layout := tt.layout
			if layout == "" {
				layout = LayoutDirect
			}
			got, err := MountArgs(layout, tt.handle, tt.attrs, tt.secrets, "/t", "/p")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("MountArgs (-want +got):\n%s", diff)
			}
		})
	}
}

// TopAt follows parent IDs, not line order, and unescapes mount points.
func TestTopAt(t *testing.T) {
	const info = "37 36 0:41 / /k/pods/u/volumes/kubernetes.io~csi/pv/mount rw - fuse.s3fs s3fs rw\n" +
		"36 35 0:40 / /k/pods/u/volumes/kubernetes.io~csi/pv/mount rw - fuse.s3fs s3fs rw\n" +
		"38 35 0:42 / /a\\040b rw - tmpfs t rw\n"
	table := mountinfo.ParseLenient(info)
	for _, tc := range []struct {
		path string
		id   int // 0: not a mount point
	}{
		{"/k/pods/u/volumes/kubernetes.io~csi/pv/mount", 37},
		{"/k/pods/u/volumes/kubernetes.io~csi/pv", 0},
		{"/a b", 38},
	} {
		top, ok := TopAt(table, tc.path)
		if ok != (tc.id != 0) || top.ID != tc.id {
			t.Errorf("TopAt(%q) = mount %d, %v; want mount %d", tc.path, top.ID, ok, tc.id)
		}
	}
}

func TestOptionsValidateLayout(t *testing.T) {
	o := NewOptions()
	o.NodeID = "n"
	for _, l := range []string{LayoutPlain, LayoutDirect, LayoutYandex, LayoutCtrox, LayoutStrict} {
		o.Layout = l
		if err := o.Validate(); err != nil {
			t.Errorf("layout %q: %v", l, err)
		}
	}
	o.Layout = "geesefs"
	if err := o.Validate(); err == nil {
		t.Error("unknown layout accepted")
	}
}

func TestFindFuseProcess(t *testing.T) {
	proc := t.TempDir()
	write := func(pid, cmdline string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(proc, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, pid, "cmdline"), []byte(cmdline), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("7", "s3fs\x00b:/p\x00/k/plugins/kubernetes.io/csi/d/h/globalmount\x00-f\x00")
	write("9", "s3fs\x00b\x00/k/pods/u/volumes/kubernetes.io~csi/pv/mount\x00-f\x00")
	write("self", "not a pid")
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/k/plugins/kubernetes.io/csi/d/h/globalmount", 7},
		{"/k/pods/u/volumes/kubernetes.io~csi/pv/mount", 9},
		{"/k/pods/other/volumes/kubernetes.io~csi/pv/mount", 0},
	} {
		if got := findFuseProcess(proc, tc.path); got != tc.want {
			t.Errorf("findFuseProcess(%s) = %d, want %d", tc.path, got, tc.want)
		}
	}
	if cmdlineNames(proc, 8, "/k") {
		t.Error("cmdlineNames of a missing pid reported true")
	}
}
