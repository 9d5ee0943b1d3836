package cluster

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// PullRegistry is a second, empty image registry on 127.0.0.1 (go-containerregistry's
// pkg/registry), for images pushed the way an operator pushes them (`make push`), which records
// every request it answers: a test proves with it that the node's containerd pulled an image
// from the registry, and which one, rather than finding it already imported.
type PullRegistry struct {
	Host string // 127.0.0.1:port
	srv  *http.Server

	mu       sync.Mutex
	requests []RegistryRequest
}

// RegistryRequest is one request the registry answered.
type RegistryRequest struct {
	Method, Path, UserAgent string
	Status                  int
}

// ServePullRegistry starts a registry on a free port of 127.0.0.1.
func ServePullRegistry() (*PullRegistry, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for the pull registry: %w", err)
	}
	r := &PullRegistry{Host: ln.Addr().String()}
	inner := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		inner.ServeHTTP(sw, req)
		r.mu.Lock()
		r.requests = append(r.requests, RegistryRequest{Method: req.Method, Path: req.URL.Path, UserAgent: req.UserAgent(), Status: sw.status})
		r.mu.Unlock()
	})}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) { w.status = code; w.ResponseWriter.WriteHeader(code) }

// Requests returns the requests answered so far, oldest first.
func (r *PullRegistry) Requests() []RegistryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

// Fetched lists, in order, the manifests (by reference: a tag or a digest) and blobs (by digest)
// of repo that clients whose User-Agent starts with agent got (GET, 200): what they pulled.
func (r *PullRegistry) Fetched(repo, agent string) (manifests, blobs []string) {
	return fetched(r.Requests(), repo, agent)
}

func fetched(reqs []RegistryRequest, repo, agent string) (manifests, blobs []string) {
	prefix := "/v2/" + repo + "/"
	for _, q := range reqs {
		if q.Method != http.MethodGet || q.Status != http.StatusOK || !strings.HasPrefix(q.UserAgent, agent) {
			continue
		}
		rest, ok := strings.CutPrefix(q.Path, prefix)
		if !ok {
			continue
		}
		if ref, ok := strings.CutPrefix(rest, "manifests/"); ok {
			manifests = append(manifests, ref)
		} else if d, ok := strings.CutPrefix(rest, "blobs/"); ok {
			blobs = append(blobs, d)
		}
	}
	return manifests, blobs
}

// Close stops the registry.
func (r *PullRegistry) Close() error { return r.srv.Close() }
