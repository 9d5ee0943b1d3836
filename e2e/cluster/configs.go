package cluster

import (
	"encoding/json"
	"fmt"
	"strings"
)

// ContainerdConfig is what the node's containerd needs to differ from a stock install.
type ContainerdConfig struct {
	Root, State, Socket string
	RuncRoot            string
	SandboxImage        string
	CNIBinDir           string
	CNIConfDir          string
	// Registry is host:port of the local image registry, reached over plain http.
	Registry string
	// MoreRegistries are further host:port registries on this host, reached over plain http too
	// (the pull registry of Options.PullRegistry).
	MoreRegistries []string
}

// RenderContainerd renders containerd's config.toml (version 2, containerd 1.6).
// restrict_oom_score_adj: this machine lacks CAP_SYS_RESOURCE, so runc cannot lower oom_score_adj
// and every sandbox fails without it. The runc root is ours so teardown finds our containers only.
func RenderContainerd(c ContainerdConfig) string {
	const cri = `plugins."io.containerd.grpc.v1.cri"`
	var b strings.Builder
	fmt.Fprintf(&b, "version = 2\nroot = %q\nstate = %q\n\n", c.Root, c.State)
	fmt.Fprintf(&b, "[grpc]\n  address = %q\n\n[ttrpc]\n  address = %q\n\n", c.Socket, c.Socket+".ttrpc")
	fmt.Fprintf(&b, "[plugins]\n  [%s]\n    sandbox_image = %q\n    restrict_oom_score_adj = true\n", cri, c.SandboxImage)
	fmt.Fprintf(&b, "    [%s.containerd]\n      snapshotter = \"overlayfs\"\n      default_runtime_name = \"runc\"\n", cri)
	fmt.Fprintf(&b, "      [%s.containerd.runtimes.runc]\n        runtime_type = \"io.containerd.runc.v2\"\n", cri)
	fmt.Fprintf(&b, "        [%s.containerd.runtimes.runc.options]\n          SystemdCgroup = false\n          Root = %q\n", cri, c.RuncRoot)
	fmt.Fprintf(&b, "    [%s.cni]\n      bin_dir = %q\n      conf_dir = %q\n", cri, c.CNIBinDir, c.CNIConfDir)
	for _, r := range append([]string{c.Registry}, c.MoreRegistries...) {
		fmt.Fprintf(&b, "    [%s.registry.mirrors.%q]\n      endpoint = [%q]\n", cri, r, "http://"+r)
	}
	fmt.Fprintf(&b, "  [plugins.\"io.containerd.internal.v1.opt\"]\n    path = %q\n", c.Root+"/opt")
	return b.String()
}

// RenderCNI renders a bridge + host-local network list. No masquerading: pods only talk to this
// host (apiserver, S3 server), and masquerade rules would outlive a crashed run.
func RenderCNI(bridge, subnet, ipamDir string) (string, error) {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "pvrescue-e2e",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      bridge,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": subnet}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": ipamDir,
				},
			},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	return string(b), err
}

// KubeletConfig is what the test node's kubelet needs.
type KubeletConfig struct {
	RuntimeSocket string
	ClientCAFile  string
	NodeIP        string
}

// RenderKubelet renders a KubeletConfiguration for this machine: cgroup v1 without systemd
// (failCgroupV1: false, cgroupfs), no swap check, client certificates only, and eviction
// thresholds low enough that a busy build machine does not evict the test pods.
func RenderKubelet(c KubeletConfig) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
failSwapOn: false
serializeImagePulls: false
clusterDomain: cluster.local
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: %s
authorization:
  mode: AlwaysAllow
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
  nodefs.inodesFree: 1%%
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, c.RuntimeSocket, c.NodeIP, c.ClientCAFile)
}

// RenderKubeconfig renders a kubeconfig using a client certificate.
func RenderKubeconfig(server, caFile, certFile, keyFile string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: e2e
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: e2e
current-context: e2e
`, server, caFile, certFile, keyFile)
}
