package images

import "testing"

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
