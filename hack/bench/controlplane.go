package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/pvrescue/pvrescue/internal/testenv"
)

// controlPlane is one etcd + kube-apiserver shared by the sections of a run (each uses its own
// objects), started on first use and stopped when the run ends.
type controlPlane struct {
	mu  sync.Mutex
	env *envtest.Environment
	cfg *rest.Config
	err error
}

var sharedControlPlane controlPlane

func (c *controlPlane) get(o *Options) (*rest.Config, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg == nil && c.err == nil {
		start := time.Now()
		c.env, c.cfg, c.err = testenv.ControlPlane{Assets: assetsDir(o)}.StartEnvironment()
		fmt.Fprintf(os.Stderr, "bench: control plane started in %s (err %v)\n", time.Since(start).Round(100*time.Millisecond), c.err)
	}
	if c.err != nil {
		return nil, c.err
	}
	return rest.CopyConfig(c.cfg), nil
}

// kubeconfig returns the control plane's admin kubeconfig (for processes the bench starts).
func (c *controlPlane) kubeconfig(o *Options) ([]byte, error) {
	if _, err := c.get(o); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.env.KubeConfig, nil
}

func (c *controlPlane) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.env != nil {
		start := time.Now()
		if err := c.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: stop control plane: %v\n", err)
		}
		fmt.Fprintf(os.Stderr, "bench: control plane stopped in %s\n", time.Since(start).Round(100*time.Millisecond))
		c.env, c.cfg = nil, nil
	}
}

// assetsDir is where kube-apiserver and etcd are: $KUBEBUILDER_ASSETS, else under -root's bin/.
func assetsDir(o *Options) string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join(o.Root, "bin", "k8s", KubeVersion)
}
