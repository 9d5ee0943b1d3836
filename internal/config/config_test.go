package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
