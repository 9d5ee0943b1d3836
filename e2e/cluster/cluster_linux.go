//go:build linux

package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pvrescue/pvrescue/e2e/images"
	"github.com/pvrescue/pvrescue/internal/testenv"
)

// Cluster is a running single-node cluster.
type Cluster struct {
	Opts       *Options
	NodeIP     string
	Server     string // https://NodeIP:port
	Kubeconfig string // admin kubeconfig (system:masters)
	Config     *rest.Config
	Client     kubernetes.Interface
	PKI        *PKI
	Registry   *images.Registry
	// PullRegistry is the empty recording registry of Options.PullRegistry (nil without it).
	PullRegistry *PullRegistry
	// PauseImage and BusyboxImage are references in Registry.
	PauseImage, BusyboxImage string
	// ContainerdSocket is the CRI endpoint of the node.
	ContainerdSocket string

	etcdURL string
	apiPort int
	procs   map[string]*Process
	order   []string
	// stopped are components stopped on purpose (StopAPIServer): Wait does not take their end
	// for a crash.
	stopped map[string]bool
}

// Sub-paths of the work dir.
func (o *Options) path(elem ...string) string {
	return filepath.Join(append([]string{o.WorkDir}, elem...)...)
}

// LogDir holds every component's log and pid file.
func (o *Options) LogDir() string { return o.path("logs") }

const iptablesChain = "PVRESCUE-E2E"

// Up starts every component and waits until the node is Ready and pods can be created.
// On failure it tears down what it started and returns an error naming the component, with the
// end of its log.
func Up(ctx context.Context, o *Options) (c *Cluster, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	c = &Cluster{Opts: o, procs: map[string]*Process{}}
	defer func() {
		if err != nil {
			if derr := c.Down(); derr != nil {
				err = fmt.Errorf("%w (teardown after failure: %w)", err, derr)
			}
			c = nil
		}
	}()
	if err := c.preflight(); err != nil {
		return c, err
	}
	// Leftovers of an earlier run that crashed before its teardown.
	if err := c.Down(); err != nil {
		return c, fmt.Errorf("clean leftovers of an earlier run in %s: %w", o.WorkDir, err)
	}
	for _, d := range []string{o.LogDir(), o.path("etcd"), o.path("run"), o.path("cni", "net.d"), o.path("cni", "ipam"), o.path("kubelet")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return c, err
		}
	}
	if err := c.markKubeletDir(); err != nil {
		return c, err
	}
	if err := recordLoops(o.path(loopsBefore)); err != nil {
		return c, err
	}
	c.NodeIP = o.NodeIP
	if c.NodeIP == "" {
		if c.NodeIP, err = defaultRouteIP(); err != nil {
			return c, err
		}
	}

	o.logf("image registry: building pause and busybox images from host files")
	if c.Registry, err = images.ServeRegistry(); err != nil {
		return c, err
	}
	pause, err := images.Pause()
	if err != nil {
		return c, err
	}
	if c.PauseImage, err = c.Registry.Push(ctx, "e2e/pause", "e2e", pause); err != nil {
		return c, err
	}
	bb, err := images.Busybox()
	if err != nil {
		return c, err
	}
	if c.BusyboxImage, err = c.Registry.Push(ctx, "e2e/busybox", "e2e", bb); err != nil {
		return c, err
	}

	if o.PullRegistry {
		if c.PullRegistry, err = ServePullRegistry(); err != nil {
			return c, err
		}
		o.logf("pull registry (empty, recording what it serves): %s", c.PullRegistry.Host)
	}

	svcIP, err := FirstServiceIP(o.ServiceCIDR)
	if err != nil {
		return c, err
	}
	ips := []net.IP{net.ParseIP(c.NodeIP), net.ParseIP("127.0.0.1"), svcIP}
	if c.PKI, err = NewPKI(o.path("pki"), ips, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}, o.NodeName); err != nil {
		return c, fmt.Errorf("make PKI: %w", err)
	}

	if err := c.startEtcd(ctx); err != nil {
		return c, err
	}
	if err := c.startAPIServer(ctx); err != nil {
		return c, err
	}
	if err := c.startControllers(ctx); err != nil {
		return c, err
	}
	if err := c.routeServiceIP(svcIP); err != nil {
		return c, err
	}
	if err := c.startContainerd(ctx); err != nil {
		return c, err
	}
	if err := c.startKubelet(ctx); err != nil {
		return c, err
	}
	return c, nil
}

func (c *Cluster) preflight() error {
	o := c.Opts
	if os.Geteuid() != 0 {
		return errors.New("the e2e cluster needs root (kubelet, containerd, mounts): run `make e2e` as root")
	}
	for _, b := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"} {
		if !exists(filepath.Join(o.KubeBinDir, b)) {
			return fmt.Errorf("%s not found in %s: run `make kube-binaries-all` (builds Kubernetes %s from the Go module proxy, ~10 min cold)", b, o.KubeBinDir, "v1.37.2")
		}
	}
	for cmd, pkg := range map[string]string{o.Etcd: "etcd-server", "containerd": "containerd", "runc": "runc", "iptables": "iptables", "ip": "iproute2"} {
		if _, err := exec.LookPath(cmd); err != nil {
			return fmt.Errorf("%s not found: run `make e2e-deps` (apt-get install %s)", cmd, pkg)
		}
	}
	if !exists(filepath.Join(o.CNIBinDir, "bridge")) || !exists(filepath.Join(o.CNIBinDir, "host-local")) {
		return fmt.Errorf("CNI plugins missing in %s: run `make e2e-deps` (apt-get install containernetworking-plugins)", o.CNIBinDir)
	}
	// A kubelet that is not ours would fight over /var/lib/kubelet and port 10250.
	if ln, err := net.Listen("tcp", ":10250"); err != nil { //nolint:gosec // checks that kubelet's port is free on every interface, as kubelet binds it
		if !c.ownsPort() {
			return fmt.Errorf("port 10250 is in use: another kubelet runs on this machine (%w); stop it first", err)
		}
	} else {
		_ = ln.Close() // only a check that the port was free
	}
	return nil
}

// ownsPort reports whether a kubelet recorded in our work dir still runs (a crashed earlier run),
// which Up's cleanup will stop.
func (c *Cluster) ownsPort() bool {
	b, err := os.ReadFile(filepath.Join(c.Opts.LogDir(), "kubelet.pid"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return false
	}
	pid, err := strconv.Atoi(f[0])
	return err == nil && startTime(pid) == f[1]
}

// createdDirs lists, one a line, the host directories Up created (kubelet's root dir, HostDirs
// that did not exist): teardown removes those and never a directory that was there before.
const createdDirs = "created-dirs"

func (c *Cluster) markKubeletDir() error {
	var made []string
	for _, d := range append([]string{c.Opts.KubeletDir}, c.Opts.HostDirs...) {
		if exists(d) {
			continue
		}
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
		made = append(made, d)
	}
	if err := os.WriteFile(c.Opts.path(createdDirs), []byte(strings.Join(made, "\n")), 0o644); err != nil {
		return err
	}
	// Workloads mount HostDirs with Bidirectional propagation, which needs a shared mount. systemd
	// makes / shared on real nodes; this machine has no systemd and / is private, so each dir becomes
	// a shared bind mount of itself (what kubelet does for its own root dir). Teardown unmounts it.
	for _, d := range c.Opts.HostDirs {
		if err := unix.Mount(d, d, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s onto itself: %w", d, err)
		}
		if err := unix.Mount("", d, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("make %s shared: %w", d, err)
		}
	}
	return nil
}

func (c *Cluster) start(name, bin string, args []string, env []string) (*Process, error) {
	c.Opts.logf("starting %s", name)
	p, err := StartProcess(c.Opts.LogDir(), name, bin, args, env)
	if err != nil {
		return nil, err
	}
	// A restarted component keeps its place in the order (Down stops in reverse).
	if _, again := c.procs[name]; !again {
		c.order = append(c.order, name)
	}
	c.procs[name] = p
	delete(c.stopped, name)
	return p, nil
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 10 s), as a control-plane
// outage would; everything else keeps running. StartAPIServer brings it back on the same
// address, so every kubeconfig and in-cluster client finds it again.
func (c *Cluster) StopAPIServer() error {
	p := c.procs["kube-apiserver"]
	if p == nil {
		return errors.New("kube-apiserver was never started")
	}
	if c.stopped == nil {
		c.stopped = map[string]bool{}
	}
	c.stopped["kube-apiserver"] = true
	c.Opts.logf("stopping kube-apiserver (pid %d)", p.Pid())
	return p.Stop(10 * time.Second)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer and waits for /readyz.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	if !c.stopped["kube-apiserver"] {
		return errors.New("kube-apiserver is not stopped")
	}
	return c.startAPIServer(ctx)
}

// Process returns a started component by name (etcd, kube-apiserver, …).
func (c *Cluster) Process(name string) *Process { return c.procs[name] }

// Wait polls cond every 200ms until it is true, ctx ends, timeout passes, or a component exits.
// The error says what was awaited and the last reason it was not yet true.
func (c *Cluster) Wait(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := testenv.Poll(ctx, 200*time.Millisecond, func(ctx context.Context) (bool, error) {
		for _, n := range c.order {
			if c.stopped[n] {
				continue
			}
			if err := c.procs[n].Exited(); err != nil {
				return false, testenv.Abort(fmt.Errorf("waiting for %s: %w", what, err))
			}
		}
		return cond(ctx)
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("timed out after %s waiting for %s: %w", timeout, what, err)
	}
	return err
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	cp, err := testenv.PickPort("")
	if err != nil {
		return err
	}
	pp, err := testenv.PickPort("")
	if err != nil {
		return err
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", cp)
	peer := fmt.Sprintf("http://127.0.0.1:%d", pp)
	if _, err := c.start("etcd", c.Opts.Etcd, []string{
		"--data-dir", c.Opts.path("etcd"), "--name", "e2e",
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "e2e=" + peer, "--unsafe-no-fsync",
	}, nil); err != nil {
		return err
	}
	c.etcdURL = client
	return c.Wait(ctx, c.Opts.Timeout, "etcd to be healthy", func(ctx context.Context) (bool, error) {
		return httpOK(ctx, http.DefaultClient, client+"/health")
	})
}

func httpOK(ctx context.Context, hc *http.Client, url string) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err
	}
	_ = resp.Body.Close() // only the status matters
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return true, nil
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	if c.apiPort == 0 {
		port, err := testenv.PickPort("")
		if err != nil {
			return err
		}
		c.apiPort = port
	}
	port := c.apiPort
	p := c.PKI.Path
	if _, err := c.start("kube-apiserver", filepath.Join(c.Opts.KubeBinDir, "kube-apiserver"), []string{
		"--etcd-servers", c.etcdURL,
		"--bind-address", "0.0.0.0", "--secure-port", strconv.Itoa(port), "--advertise-address", c.NodeIP,
		"--cert-dir", c.Opts.path("apiserver"),
		"--tls-cert-file", p(APIServerCert), "--tls-private-key-file", p(APIServerKey),
		"--client-ca-file", p(CACert),
		"--service-account-key-file", p(ServiceAcctPub), "--service-account-signing-key-file", p(ServiceAcctKey),
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range", c.Opts.ServiceCIDR,
		"--authorization-mode", "Node,RBAC",
		"--allow-privileged=true",
		// No kube-proxy here: let the apiserver dial webhook Services at their endpoints.
		"--enable-aggregator-routing=true",
		"--kubelet-client-certificate", p(AdminCert), "--kubelet-client-key", p(AdminKey),
		"--kubelet-preferred-address-types", "InternalIP",
		"--profiling=false", "--v=1",
	}, nil); err != nil {
		return err
	}
	c.Server = fmt.Sprintf("https://%s:%d", c.NodeIP, port)
	c.Kubeconfig = c.Opts.path("admin.kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, []byte(RenderKubeconfig(c.Server, p(CACert), p(AdminCert), p(AdminKey))), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(c.Opts.path("kubelet.kubeconfig"), []byte(RenderKubeconfig(c.Server, p(CACert), p(KubeletCert), p(KubeletKey))), 0o600); err != nil {
		return err
	}
	hc, err := c.adminHTTPClient()
	if err != nil {
		return err
	}
	if err := c.Wait(ctx, c.Opts.Timeout, "kube-apiserver /readyz", func(ctx context.Context) (bool, error) {
		return httpOK(ctx, hc, c.Server+"/readyz")
	}); err != nil {
		return err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return err
	}
	// The suite's waits poll; client-go's default 5 QPS would throttle them.
	c.Config.QPS, c.Config.Burst = 50, 100
	c.Client, err = kubernetes.NewForConfig(c.Config)
	return err
}

func (c *Cluster) adminHTTPClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(c.PKI.Path(AdminCert), c.PKI.Path(AdminKey))
	if err != nil {
		return nil, err
	}
	ca, err := os.ReadFile(c.PKI.Path(CACert))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

func (c *Cluster) startControllers(ctx context.Context) error {
	p := c.PKI.Path
	if _, err := c.start("kube-controller-manager", filepath.Join(c.Opts.KubeBinDir, "kube-controller-manager"), []string{
		"--kubeconfig", c.Kubeconfig,
		// Without the service-account controller (and its key) no pod can be created in a new namespace.
		"--service-account-private-key-file", p(ServiceAcctKey),
		"--root-ca-file", p(CACert),
		"--use-service-account-credentials=false",
		"--leader-elect=false", "--secure-port=0", "--v=1",
	}, nil); err != nil {
		return err
	}
	if _, err := c.start("kube-scheduler", filepath.Join(c.Opts.KubeBinDir, "kube-scheduler"), []string{
		"--kubeconfig", c.Kubeconfig, "--leader-elect=false", "--secure-port=0", "--v=1",
	}, nil); err != nil {
		return err
	}
	return c.Wait(ctx, c.Opts.Timeout, "the service-account controller to create default/default", func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, err
	})
}

// routeServiceIP stands in for kube-proxy for one Service only: pods (and host-network pods) reach
// the kubernetes Service's ClusterIP, which in-cluster clients use, at the apiserver.
func (c *Cluster) routeServiceIP(svcIP net.IP) error {
	port := c.Server[strings.LastIndex(c.Server, ":")+1:]
	cmds := [][]string{
		{"-t", "nat", "-N", iptablesChain},
		{"-t", "nat", "-A", iptablesChain, "-d", svcIP.String() + "/32", "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", c.NodeIP + ":" + port},
		{"-t", "nat", "-I", "PREROUTING", "-j", iptablesChain},
		{"-t", "nat", "-I", "OUTPUT", "-j", iptablesChain},
	}
	for _, a := range cmds {
		if out, err := exec.Command("iptables", a...).CombinedOutput(); err != nil {
			return fmt.Errorf("iptables %s: %w: %s", strings.Join(a, " "), err, out)
		}
	}
	return nil
}

func (c *Cluster) startContainerd(ctx context.Context) error {
	o := c.Opts
	c.ContainerdSocket = o.path("run", "containerd.sock")
	cni, err := RenderCNI(o.Bridge, o.PodSubnet, o.path("cni", "ipam"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(o.path("cni", "net.d", "10-pvrescue-e2e.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	cc := ContainerdConfig{
		Root: o.path("containerd", "root"), State: o.path("containerd", "state"), Socket: c.ContainerdSocket,
		RuncRoot: o.path("containerd", "runc"), SandboxImage: c.PauseImage,
		CNIBinDir: o.CNIBinDir, CNIConfDir: o.path("cni", "net.d"), Registry: c.Registry.Host,
	}
	if c.PullRegistry != nil {
		cc.MoreRegistries = []string{c.PullRegistry.Host}
	}
	conf := RenderContainerd(cc)
	confPath := o.path("containerd.toml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	if _, err := c.start("containerd", "containerd", []string{"--config", confPath}, nil); err != nil {
		return err
	}
	return c.Wait(ctx, c.Opts.Timeout, "containerd's socket", func(ctx context.Context) (bool, error) {
		conn, err := net.Dial("unix", c.ContainerdSocket)
		if err != nil {
			return false, err
		}
		_ = conn.Close() // only a check that the socket answers
		return true, nil
	})
}

func (c *Cluster) startKubelet(ctx context.Context) error {
	o := c.Opts
	cfgPath := o.path("kubelet", "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(RenderKubelet(KubeletConfig{
		RuntimeSocket: c.ContainerdSocket, ClientCAFile: c.PKI.Path(CACert), NodeIP: c.NodeIP,
	})), 0o644); err != nil {
		return err
	}
	if _, err := c.start("kubelet", filepath.Join(o.KubeBinDir, "kubelet"), []string{
		"--config", cfgPath, "--kubeconfig", o.path("kubelet.kubeconfig"),
		"--hostname-override", o.NodeName, "--node-ip", c.NodeIP,
		"--root-dir", o.KubeletDir, "--cert-dir", o.path("kubelet", "pki"), "--v=1",
	}, nil); err != nil {
		return err
	}
	return c.Wait(ctx, c.Opts.Timeout, "node "+o.NodeName+" to be Ready", func(ctx context.Context) (bool, error) {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				if cond.Status == corev1.ConditionTrue {
					return true, nil
				}
				return false, fmt.Errorf("condition Ready=%s: %s", cond.Status, cond.Message)
			}
		}
		return false, errors.New("no Ready condition yet")
	})
}

func defaultRouteIP() (string, error) {
	// The address the kernel picks to leave the host; no packet is sent for UDP "dial".
	conn, err := net.Dial("udp", "192.0.2.254:9")
	if err != nil {
		conn, err = net.Dial("udp", "10.255.255.254:9")
		if err != nil {
			return "", fmt.Errorf("find the node address (set --node-ip): %w", err)
		}
	}
	defer func() { _ = conn.Close() }() // a UDP "dial" that sends nothing
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// IsNotFound is apierrors.IsNotFound, re-exported for the scenarios' waits.
func IsNotFound(err error) bool { return apierrors.IsNotFound(err) }
