package cluster

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestFetched(t *testing.T) {
	const cd, ggcr = "containerd/1.6.20", "go-containerregistry/v0.22.1"
	reqs := []RegistryRequest{
		{http.MethodPut, "/v2/p/webhook/manifests/v1", ggcr, http.StatusCreated},
		{http.MethodHead, "/v2/p/webhook/manifests/v1", cd, http.StatusOK},
		{http.MethodGet, "/v2/p/webhook/manifests/sha256:idx", cd, http.StatusOK},
		{http.MethodGet, "/v2/p/webhook/manifests/sha256:img", cd, http.StatusOK},
		{http.MethodGet, "/v2/p/webhook/blobs/sha256:cfg", cd, http.StatusOK},
		{http.MethodGet, "/v2/p/webhook/blobs/sha256:gone", cd, http.StatusNotFound},
		{http.MethodGet, "/v2/p/webhook/blobs/sha256:pushcheck", ggcr, http.StatusOK},
		{http.MethodGet, "/v2/p/webhook-x/manifests/v1", cd, http.StatusOK},
		{http.MethodGet, "/v2/p/agent/manifests/sha256:a", cd, http.StatusOK},
	}
	for _, tc := range []struct {
		repo, agent      string
		manifests, blobs []string
	}{
		{"p/webhook", "containerd/", []string{"sha256:idx", "sha256:img"}, []string{"sha256:cfg"}},
		{"p/agent", "containerd/", []string{"sha256:a"}, nil},
		{"p/webhook", "go-containerregistry/", nil, []string{"sha256:pushcheck"}},
		{"p/helper", "containerd/", nil, nil},
	} {
		m, b := fetched(reqs, tc.repo, tc.agent)
		if d := cmp.Diff(tc.manifests, m); d != "" {
			t.Errorf("%s by %s: manifests (-want +got):\n%s", tc.repo, tc.agent, d)
		}
		if d := cmp.Diff(tc.blobs, b); d != "" {
			t.Errorf("%s by %s: blobs (-want +got):\n%s", tc.repo, tc.agent, d)
		}
	}
}

// The registry serves what is pushed to it and records both sides.
func TestPullRegistryRecords(t *testing.T) {
	r, err := ServePullRegistry()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Close() }()
	img, err := random.Image(64, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(r.Host + "/p/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Image(ref.Context().Digest(d.String()), remote.WithContext(ctx), remote.WithUserAgent("tester")); err != nil {
		t.Fatal(err)
	}
	m, _ := r.Fetched("p/app", "tester")
	if len(m) != 1 || m[0] != d.String() {
		t.Errorf("fetched manifests %v, want [%s]", m, d)
	}
	var puts int
	for _, q := range r.Requests() {
		if q.Method == http.MethodPut && strings.HasPrefix(q.Path, "/v2/p/app/") {
			puts++
		}
	}
	if puts == 0 {
		t.Errorf("no PUT recorded: %+v", r.Requests())
	}
}

func TestRenderContainerdMirrors(t *testing.T) {
	const cri = `plugins."io.containerd.grpc.v1.cri".registry.mirrors`
	base := ContainerdConfig{Registry: "127.0.0.1:5000"}
	more := base
	more.MoreRegistries = []string{"127.0.0.1:6000"}
	for _, tc := range []struct {
		c    ContainerdConfig
		want []string
	}{
		{base, []string{"127.0.0.1:5000"}},
		{more, []string{"127.0.0.1:5000", "127.0.0.1:6000"}},
	} {
		out := RenderContainerd(tc.c)
		if n := strings.Count(out, cri); n != len(tc.want) {
			t.Errorf("%d mirrors rendered, want %d:\n%s", n, len(tc.want), out)
		}
		for _, h := range tc.want {
			if !strings.Contains(out, "["+cri+`."`+h+`"]`+"\n      endpoint = [\"http://"+h+"\"]") {
				t.Errorf("no http mirror for %s:\n%s", h, out)
			}
		}
	}
}
