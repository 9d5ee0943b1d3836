// Package cluster brings up a real single-node Kubernetes cluster on this machine as local
// processes — etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd with runc
// and CNI, kubelet — with an in-process image registry, and tears it all down again.
package cluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/pvrescue/pvrescue/internal/config"
)

// Options configures a cluster. NewOptions gives working defaults for this machine.
type Options struct {
	// WorkDir holds every file of the cluster: PKI, data, logs, pid files, containerd's root.
	WorkDir string
	// KubeBinDir holds kube-apiserver, kube-controller-manager, kube-scheduler and kubelet.
	KubeBinDir string
	// Etcd is the etcd binary.
	Etcd string
	// KubeletDir is kubelet's root directory. The pvrescue agent and CSI drivers expect
	// /var/lib/kubelet, so the suite uses that and refuses to start if another kubelet runs.
	KubeletDir string
	// NodeName is the name the kubelet registers.
	NodeName string
	// NodeIP is the host address the apiserver advertises and the kubelet reports; empty picks
	// the address of the interface of the default route.
	NodeIP string
	// PodSubnet is host-local's range on the bridge.
	PodSubnet string
	// ServiceCIDR is the apiserver's service range; its first address is the kubernetes Service.
	ServiceCIDR string
	// Bridge is the name of the CNI bridge interface (removed on teardown).
	Bridge string
	// CNIBinDir holds the CNI plugins (Debian: /usr/lib/cni).
	CNIBinDir string
	// HostDirs are host directories that workloads of the cluster fill (the pvrescue agent's state
	// dir): teardown unmounts what is under them, detaches loop devices backed by files there, and
	// removes them when they did not exist before Up.
	HostDirs []string
	// PullRegistry starts a second, empty registry (Cluster.PullRegistry) that containerd pulls
	// from and that records what it serves, for images a test pushes itself (`make push`).
	PullRegistry bool
	// Timeout bounds each wait for a component to become ready.
	Timeout time.Duration
	// KeepLogs leaves WorkDir/logs after teardown (tests set it when they failed).
	KeepLogs bool
	// Logf narrates progress; nil is silent.
	Logf func(format string, args ...any)
}

// NewOptions returns the defaults, with WorkDir under dir.
func NewOptions(dir string) *Options {
	return &Options{
		WorkDir:     dir,
		KubeBinDir:  "",
		Etcd:        "etcd",
		KubeletDir:  "/var/lib/kubelet",
		NodeName:    "pvrescue-e2e",
		PodSubnet:   "10.244.0.0/24",
		ServiceCIDR: "10.0.0.0/24",
		Bridge:      "pvre2e0",
		CNIBinDir:   "/usr/lib/cni",
		HostDirs:    []string{config.Default().StateDir},
		Timeout:     2 * time.Minute,
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.WorkDir, "work-dir", o.WorkDir, "directory for every file of the cluster")
	fs.StringVar(&o.KubeBinDir, "kube-bin-dir", o.KubeBinDir, "directory holding kube-apiserver, kube-controller-manager, kube-scheduler, kubelet")
	fs.StringVar(&o.Etcd, "etcd", o.Etcd, "etcd binary")
	fs.StringVar(&o.KubeletDir, "kubelet-dir", o.KubeletDir, "kubelet root directory")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "node name")
	fs.StringVar(&o.NodeIP, "node-ip", o.NodeIP, "node address (default: address of the default route's interface)")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "bound of each readiness wait")
}

// ErrInvalidOptions is wrapped by Validate's errors.
var ErrInvalidOptions = errors.New("invalid cluster options")

// Validate checks the options; it does not touch the machine.
func (o *Options) Validate() error {
	if o.WorkDir == "" || !filepath.IsAbs(o.WorkDir) {
		return fmt.Errorf("%w: work dir %q must be an absolute path", ErrInvalidOptions, o.WorkDir)
	}
	// Unix socket paths are limited to 107 bytes; containerd's lives in the work dir.
	if len(o.WorkDir) > 60 {
		return fmt.Errorf("%w: work dir %q is too long for unix socket paths (max 60 bytes)", ErrInvalidOptions, o.WorkDir)
	}
	if o.KubeBinDir == "" {
		return fmt.Errorf("%w: kube bin dir is required", ErrInvalidOptions)
	}
	if o.NodeIP != "" && net.ParseIP(o.NodeIP) == nil {
		return fmt.Errorf("%w: node ip %q", ErrInvalidOptions, o.NodeIP)
	}
	for _, c := range []string{o.PodSubnet, o.ServiceCIDR} {
		if _, _, err := net.ParseCIDR(c); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOptions, err)
		}
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("%w: timeout must be positive", ErrInvalidOptions)
	}
	return nil
}

// FirstServiceIP is the ClusterIP of the kubernetes Service in cidr.
func FirstServiceIP(cidr string) (net.IP, error) {
	_, n, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, err
	}
	ip := n.IP.To4()
	if ip == nil {
		return nil, fmt.Errorf("%s: only IPv4 service ranges are supported", cidr)
	}
	out := make(net.IP, 4)
	copy(out, ip)
	out[3]++
	return out, nil
}

func (o *Options) logf(format string, args ...any) {
	if o.Logf != nil {
		o.Logf(format, args...)
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
