package images

import (
	"debug/elf"
	"path/filepath"
	"testing"
)

func TestBuildAsSetsUser(t *testing.T) {
	img, err := BuildAs(nil, []string{"/x"}, nil, HelperUser)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || cf.Config.Entrypoint[0] != "/x" {
		t.Fatalf("config %+v", cf.Config)
	}
	img, err = Build(nil, []string{"/x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cf, _ := img.ConfigFile(); cf.Config.User != "" {
		t.Fatalf("Build set user %q", cf.Config.User)
	}
}

// TestBuildStaticRacer: the racer builds as a static binary (no ELF interpreter): the racer
// image has no libc.
func TestBuildStaticRacer(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "racer")
	if err := BuildStatic(t.Context(), "..", RacerPkg, bin); err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("%s has an ELF interpreter: not static", bin)
		}
	}
}
