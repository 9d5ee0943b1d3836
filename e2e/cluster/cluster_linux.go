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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pvrescue/pvrescue/e2e/images"
	"github.com/pvrescue/pvrescue/internal/config"
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
	// PauseImage and BusyboxImage are references in Registry.
	PauseImage, BusyboxImage string
	// ContainerdSocket is the CRI endpoint of the node.
	ContainerdSocket string

	etcdURL string
	procs   map[string]*Process
	order   []string
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
				err = fmt.Errorf("%w (teardown after failure: %v)", err, derr)
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
	if ln, err := net.Listen("tcp", ":10250"); err != nil {
		if !c.ownsPort() {
			return fmt.Errorf("port 10250 is in use: another kubelet runs on this machine (%v); stop it first", err)
		}
	} else {
		ln.Close()
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
	c.procs[name] = p
	c.order = append(c.order, name)
	return p, nil
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
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %s", url, resp.Status)
	}
	return true, nil
}

func (c *Cluster) startAPIServer(ctx context.Context) error {
	port, err := testenv.PickPort("")
	if err != nil {
		return err
	}
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
			return fmt.Errorf("iptables %s: %v: %s", strings.Join(a, " "), err, out)
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
	conf := RenderContainerd(ContainerdConfig{
		Root: o.path("containerd", "root"), State: o.path("containerd", "state"), Socket: c.ContainerdSocket,
		RuncRoot: o.path("containerd", "runc"), SandboxImage: c.PauseImage,
		CNIBinDir: o.CNIBinDir, CNIConfDir: o.path("cni", "net.d"), Registry: c.Registry.Host,
	})
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
		conn.Close()
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
				return false, fmt.Errorf("Ready=%s: %s", cond.Status, cond.Message)
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
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// Down stops every component and removes what the cluster made: containers, mounts under the work
// and kubelet dirs, network namespaces, loop devices backed by files there, the bridge, the
// iptables chain, kubelet's cgroups and the work dir (logs kept with KeepLogs). It is safe to call
// on a half-started cluster and from another process (it finds processes by their pid files).
func (c *Cluster) Down() error {
	o := c.Opts
	var errs []error
	if c.Client != nil {
		c.drain(60 * time.Second)
	}
	// kubelet goes first, or it would restart the containers being removed.
	if p := c.procs["kubelet"]; p != nil {
		errs = append(errs, p.Stop(15*time.Second))
	} else {
		KillRecorded(o.LogDir(), "kubelet")
	}
	errs = append(errs, c.removeContainers())
	for i := len(c.order) - 1; i >= 0; i-- {
		if n := c.order[i]; n != "kubelet" {
			errs = append(errs, c.procs[n].Stop(10*time.Second))
		}
	}
	c.procs, c.order = map[string]*Process{}, nil
	if left := KillRecorded(o.LogDir()); len(left) > 0 {
		o.logf("killed processes recorded in %s: %s", o.LogDir(), strings.Join(left, ", "))
	}
	if c.Registry != nil {
		errs = append(errs, c.Registry.Close())
		c.Registry = nil
	}
	errs = append(errs, detachNewForeignLoops(o.path(loopsBefore)))
	removeNewLoopNodes(o.path(loopsBefore))
	errs = append(errs, CleanHost(o.Bridge, append([]string{o.WorkDir, o.KubeletDir}, o.HostDirs...)...))
	if b, err := os.ReadFile(o.path(createdDirs)); err == nil {
		for _, d := range strings.Fields(string(b)) {
			if d == o.KubeletDir || slices.Contains(o.HostDirs, d) {
				errs = append(errs, os.RemoveAll(d))
			}
		}
	}
	errs = append(errs, removeWorkDir(o.WorkDir, o.KeepLogs))
	return errors.Join(errs...)
}

// removeContainers deletes every container of our runc root (so they stop, and their cgroups go)
// and kills the containerd shims serving our socket, which would otherwise outlive containerd.
func (c *Cluster) removeContainers() error {
	var errs []error
	roots, _ := filepath.Glob(c.Opts.path("containerd", "runc", "*"))
	for _, root := range roots {
		out, err := exec.Command("runc", "--root", root, "list", "-q").Output()
		if err != nil {
			errs = append(errs, fmt.Errorf("runc list in %s: %w", root, err))
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			if b, err := exec.Command("runc", "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("runc delete %s: %v: %s", id, err, b))
			}
		}
	}
	sock := c.Opts.path("run", "containerd.sock")
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.Contains(args[0], "containerd-shim") && strings.Contains(string(b), sock) {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	return errors.Join(errs...)
}

// CleanHost undoes the host-wide effects of a cluster whose files are under dirs.
func CleanHost(bridge string, dirs ...string) error {
	var errs []error
	errs = append(errs, unmountUnder(dirs...))
	errs = append(errs, removeNetns())
	errs = append(errs, DetachLoopsUnder(dirs...))
	if exec.Command("ip", "link", "show", bridge).Run() == nil {
		if out, err := exec.Command("ip", "link", "del", bridge).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("delete bridge %s: %v: %s", bridge, err, out))
		}
	}
	for _, hook := range []string{"PREROUTING", "OUTPUT"} {
		for exec.Command("iptables", "-t", "nat", "-D", hook, "-j", iptablesChain).Run() == nil {
		}
	}
	if exec.Command("iptables", "-t", "nat", "-F", iptablesChain).Run() == nil {
		_ = exec.Command("iptables", "-t", "nat", "-X", iptablesChain).Run()
	}
	removeKubeCgroups()
	errs = append(errs, removeDiskLinks())
	return errors.Join(errs...)
}

// DiskLinkPrefix starts the name of every /dev/disk/by-id link of the suite's disks (and of the
// agent's fakes standing in for them); teardown removes them all.
const DiskLinkPrefix = "pvrescue-e2e-"

func removeDiskLinks() error {
	links, _ := filepath.Glob("/dev/disk/by-id/" + DiskLinkPrefix + "*")
	var errs []error
	for _, l := range links {
		if err := os.Remove(l); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func unmountUnder(roots ...string) error {
	var errs []error
	// Stacked and propagated mounts can reappear once a parent goes: a few passes.
	for pass := 0; pass < 5; pass++ {
		info, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			return err
		}
		mps := MountPointsUnder(string(info), roots...)
		if len(mps) == 0 {
			return nil
		}
		errs = nil
		for _, mp := range mps {
			if err := unix.Unmount(mp, 0); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				if err2 := unix.Unmount(mp, unix.MNT_DETACH); err2 != nil && !errors.Is(err2, unix.EINVAL) {
					errs = append(errs, fmt.Errorf("unmount %s: %w", mp, err2))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// removeNetns removes the pod network namespaces containerd's CNI made (/run/netns/cni-*).
func removeNetns() error {
	var errs []error
	ns, _ := filepath.Glob("/run/netns/cni-*")
	for _, n := range ns {
		if err := unix.Unmount(n, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", n, err))
		}
		if err := os.Remove(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	_ = os.Remove("/run/netns") // only when empty: containerd made it
	return errors.Join(errs...)
}

// DetachLoopsUnder detaches every loop device whose backing file is under one of roots, and
// removes the /dev/loopN node when N is at least 100 (numbers kept for devices made by mknod).
func DetachLoopsUnder(roots ...string) error {
	var errs []error
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || !UnderAny(string(b), roots...) {
			continue
		}
		dev := "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		if err := DetachLoop(dev); err != nil {
			errs = append(errs, err)
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dev), "loop")); err == nil && n >= 100 {
			_ = os.Remove(dev)
		}
	}
	return errors.Join(errs...)
}

// DetachLoop detaches a loop device (LOOP_CLR_FD). The kernel detaches lazily while it is open.
func DetachLoop(dev string) error {
	fd, err := unix.Open(dev, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dev, err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlSetInt(fd, unix.LOOP_CLR_FD, 0); err != nil && !errors.Is(err, unix.ENXIO) {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	return nil
}

// removeKubeCgroups removes kubelet's kubepods cgroups (empty once the containers are deleted).
func removeKubeCgroups() {
	subs, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	for _, s := range subs {
		var dirs []string
		_ = filepath.WalkDir(s, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = unix.Rmdir(dirs[i])
		}
	}
}

func removeWorkDir(dir string, keepLogs bool) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if keepLogs && e.Name() == "logs" {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if !keepLogs {
		errs = append(errs, os.Remove(dir))
	}
	return errors.Join(errs...)
}

// IsNotFound is apierrors.IsNotFound, re-exported for the scenarios' waits.
func IsNotFound(err error) bool { return apierrors.IsNotFound(err) }

// Teardown removes a cluster left by another process (make demo-down), from its work dir alone.
// When the apiserver still answers, workloads are drained first so kubelet and the agent release
// their devices and mounts themselves.
func Teardown(o *Options) error {
	c := &Cluster{Opts: o, procs: map[string]*Process{}}
	if cfg, err := clientcmd.BuildConfigFromFlags("", o.path("admin.kubeconfig")); err == nil {
		cfg.Timeout = 5 * time.Second
		if cs, err := kubernetes.NewForConfig(cfg); err == nil {
			if _, err := cs.Discovery().ServerVersion(); err == nil {
				c.Client = cs
			}
		}
	}
	return c.Down()
}

// systemNamespaces are left to the forced teardown.
var systemNamespaces = map[string]bool{"default": true, "kube-system": true, "kube-public": true, "kube-node-lease": true}

// drain deletes the test namespaces and every PV and waits (bounded) until their pods are gone, so
// that kubelet unmaps block volumes (its loop "device locks") and unpublishes CSI volumes, and the
// pvrescue agent retires its fakes, before the processes are killed. Best effort: whatever is left
// is removed by force afterwards.
func (c *Cluster) drain(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	var user []string
	for _, ns := range nss.Items {
		if !systemNamespaces[ns.Name] && ns.Name != "pvrescue-system" {
			user = append(user, ns.Name)
			_ = c.Client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
		}
	}
	_ = c.Client.CoreV1().PersistentVolumes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	c.Opts.logf("draining: deleting namespaces %v and every PV", user)
	lastLeft := 0
	for ctx.Err() == nil {
		left := 0
		for _, ns := range user {
			pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err == nil {
				left += len(pods.Items)
			}
		}
		pvs, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
		if err == nil {
			left += len(pvs.Items)
		}
		if left == 0 {
			return
		}
		lastLeft = left
		time.Sleep(250 * time.Millisecond)
	}
	c.Opts.logf("draining timed out after %s with %d pods/PVs left; removing the rest by force", timeout, lastLeft)
}

const loopsBefore = "loops-before"

// recordLoops remembers the loop devices attached before the cluster started.
func recordLoops(path string) error {
	var lines []string
	for dev, back := range attachedLoops() {
		lines = append(lines, dev+" "+back)
	}
	for _, n := range agentLoopNodes() {
		lines = append(lines, "node "+n)
	}
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}

// agentLoopNodes lists the /dev/loopN nodes in the agent's range (config firstLoopMinor and the
// next 31), which the agent makes with mknod for its fakes.
func agentLoopNodes() []string {
	first := config.Default().LocalBlock.FirstLoopMinor
	var out []string
	for n := first; n < first+32; n++ {
		if p := fmt.Sprintf("/dev/loop%d", n); exists(p) {
			out = append(out, p)
		}
	}
	return out
}

// removeNewLoopNodes removes the agent-range loop nodes that appeared since Up and are detached.
func removeNewLoopNodes(beforeFile string) {
	b, err := os.ReadFile(beforeFile)
	if err != nil {
		return
	}
	attached := attachedLoops()
	for _, n := range agentLoopNodes() {
		if !strings.Contains(string(b), "node "+n+"\n") && !strings.HasSuffix(string(b), "node "+n) {
			if _, busy := attached[n]; !busy {
				_ = os.Remove(n)
			}
		}
	}
}

func attachedLoops() map[string]string {
	m := map[string]string{}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil {
			m["/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f)))] = strings.TrimSpace(string(b))
		}
	}
	return m
}

// detachNewForeignLoops detaches loop devices attached since Up whose backing file was opened in
// another mount namespace, which the kernel then names relative to that mount ("/" for kubelet's
// device locks on bind-mounted device nodes, "/localdisk/…" for the agent's fakes in its state-dir
// mount): paths under the work dir cannot name them.
func detachNewForeignLoops(beforeFile string) error {
	b, err := os.ReadFile(beforeFile)
	if err != nil {
		return nil // no record: never guess
	}
	before := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if dev, back, ok := strings.Cut(line, " "); ok {
			before[dev] = back
		}
	}
	var errs []error
	for dev, back := range attachedLoops() {
		if prev, ok := before[dev]; ok && prev == back {
			continue
		}
		if ForeignLoopBacking(back) {
			errs = append(errs, DetachLoop(dev))
			if n, err := strconv.Atoi(strings.TrimPrefix(dev, "/dev/loop")); err == nil && n >= 100 {
				_ = os.Remove(dev)
			}
		}
	}
	return errors.Join(errs...)
}
