//go:build linux

package stack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/images"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/csitest"
)

// CSI is one instance of the test S3 CSI node plugin, deployed as k8s-csi-s3 deploys its node
// plugin: a DaemonSet whose pod runs
//
//   - container csi-s3: the plugin, privileged, on the pod network (no hostNetwork, no hostPID),
//     with exactly the upstream mounts: its socket dir <kubelet>/plugins/<driver> at /csi,
//     <kubelet>/pods and <kubelet>/plugins/kubernetes.io/csi (both Bidirectional, at the same
//     paths) and /dev/fuse. s3fs runs in it as the plugin's child, so it dies with the pod;
//   - container driver-registrar: the same image's registrar (the node-driver-registrar's job),
//     with /csi and <kubelet>/plugins_registry at /registration, which kubelet's plugin watcher
//     finds.
//
// Restart deletes the pod and lets the DaemonSet bring a new one; Stop keeps it down (a
// nodeSelector no node matches) until Start.
type CSI struct {
	Driver, Layout string
	// Image is the plugin image's reference in the cluster's registry.
	Image string
	c     *cluster.Cluster
}

// DirectDriver is the driver name of the suite's first plugin (direct layout). The field names
// ru.yandex.s3.csi and ch.ctrox.csi.s3-driver are left to the instances imitating those drivers.
const DirectDriver = "csi-s3"

// CSINamespace holds the plugins' DaemonSets (k8s-csi-s3 uses kube-system; a namespace of the
// suite's own keeps its objects apart).
const CSINamespace = "e2e-csi"

// Container names of the plugin pod, as in k8s-csi-s3's manifest.
const (
	CSIContainer       = "csi-s3"
	RegistrarContainer = "driver-registrar"
)

// BuildCSI compiles cmd csi-s3-test of the e2e module (static, like the images' other binaries),
// builds its image with s3fs, pushes it, and returns the direct-layout instance (not deployed).
func BuildCSI(ctx context.Context, c *cluster.Cluster, e2eDir string) (*CSI, error) {
	bin := filepath.Join(c.Opts.WorkDir, "bin", "csi-s3-test")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./csi-s3-test")
	cmd.Dir = e2eDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build csi-s3-test: %w\n%s", err, out)
	}
	files, entry, err := PluginImage(bin)
	if err != nil {
		return nil, err
	}
	img, err := images.Build(files, entry, nil)
	if err != nil {
		return nil, err
	}
	ref, err := c.Registry.Push(ctx, "e2e/csi-s3-test", "e2e", img)
	if err != nil {
		return nil, err
	}
	return &CSI{Driver: DirectDriver, Layout: csitest.LayoutDirect, Image: ref, c: c}, nil
}

// Sibling is another instance of the same plugin image under its own driver name and field
// layout (csitest.LayoutYandex, csitest.LayoutCtrox). Start it.
func (p *CSI) Sibling(driver, layout string) *CSI {
	return &CSI{Driver: driver, Layout: layout, Image: p.Image, c: p.c}
}

// Name is the DaemonSet's name.
func (p *CSI) Name() string { return "csi-s3-" + p.Layout }

func (p *CSI) labels() map[string]string { return map[string]string{"app": p.Name()} }

// DaemonSet renders the plugin's DaemonSet.
func (p *CSI) DaemonSet() *appsv1.DaemonSet {
	kubelet := p.c.Opts.KubeletDir
	bidi := corev1.MountPropagationBidirectional
	dirOrCreate, charDev := corev1.HostPathDirectoryOrCreate, corev1.HostPathCharDev
	hostPath := func(name, path string, t *corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: t}}}
	}
	hostSock := csitest.HostCSISocket(kubelet, p.Driver)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name(), Namespace: CSINamespace, Labels: p.labels()},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: p.labels()},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: p.labels()},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  ptr(false),
					TerminationGracePeriodSeconds: ptr(int64(2)),
					Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{
						{
							Name: RegistrarContainer, Image: p.Image, ImagePullPolicy: corev1.PullIfNotPresent,
							Command: []string{"/csi-s3-test", "register", "--csi-address=/csi/csi.sock",
								"--kubelet-registration-path=" + hostSock, "--registration-dir=/registration"},
							VolumeMounts: []corev1.VolumeMount{
								{Name: "plugin-dir", MountPath: "/csi"},
								{Name: "registration-dir", MountPath: "/registration"},
							},
						},
						{
							Name: CSIContainer, Image: p.Image, ImagePullPolicy: corev1.PullIfNotPresent,
							SecurityContext: &corev1.SecurityContext{
								Privileged:               ptr(true),
								Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"SYS_ADMIN"}},
								AllowPrivilegeEscalation: ptr(true),
							},
							Command: []string{"/csi-s3-test", "--endpoint=unix:///csi/csi.sock", "--node-id=$(NODE_ID)",
								"--driver=" + p.Driver, "--layout=" + p.Layout, "--kubelet-dir=" + kubelet, "--s3fs=/usr/bin/s3fs"},
							Env: []corev1.EnvVar{{Name: "NODE_ID", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
							VolumeMounts: []corev1.VolumeMount{
								{Name: "plugin-dir", MountPath: "/csi"},
								{Name: "pods-mount-dir", MountPath: filepath.Join(kubelet, "pods"), MountPropagation: &bidi},
								{Name: "csi-stage-dir", MountPath: filepath.Join(kubelet, "plugins", "kubernetes.io", "csi"), MountPropagation: &bidi},
								{Name: "fuse-device", MountPath: "/dev/fuse"},
							},
						},
					},
					Volumes: []corev1.Volume{
						hostPath("registration-dir", filepath.Join(kubelet, "plugins_registry"), &dirOrCreate),
						hostPath("plugin-dir", filepath.Dir(hostSock), &dirOrCreate),
						hostPath("pods-mount-dir", filepath.Join(kubelet, "pods"), &dirOrCreate),
						hostPath("csi-stage-dir", filepath.Join(kubelet, "plugins", "kubernetes.io", "csi"), &dirOrCreate),
						hostPath("fuse-device", "/dev/fuse", &charDev),
					},
				},
			},
		},
	}
}

// Start ensures the namespace, the CSIDriver object and the DaemonSet (creating it, or lifting
// Stop's nodeSelector), and waits until a plugin pod runs and kubelet registered it.
func (p *CSI) Start(ctx context.Context) error {
	cs := p.c.Client
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: CSINamespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", CSINamespace, err)
	}
	_, err := cs.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: p.Driver},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired: ptr(false), PodInfoOnMount: ptr(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CSIDriver %s: %w", p.Driver, err)
	}
	_, err = cs.AppsV1().DaemonSets(CSINamespace).Create(ctx, p.DaemonSet(), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		_, err = cs.AppsV1().DaemonSets(CSINamespace).Patch(ctx, p.Name(), types.MergePatchType, []byte(`{"spec":{"template":{"spec":{"nodeSelector":null}}}}`), metav1.PatchOptions{})
	}
	if err != nil {
		return fmt.Errorf("create DaemonSet %s/%s: %w", CSINamespace, p.Name(), err)
	}
	_, err = p.WaitRegistered(ctx, "")
	return err
}

// WaitRegistered waits until a plugin pod other than notUID runs with both containers ready,
// its registrar logged kubelet's successful registration and the CSINode lists the driver. It
// returns that pod.
func (p *CSI) WaitRegistered(ctx context.Context, notUID types.UID) (*corev1.Pod, error) {
	var got *corev1.Pod
	err := p.c.Wait(ctx, p.c.Opts.Timeout, "kubelet to register the CSI plugin "+p.Driver+" (DaemonSet "+p.Name()+")", func(ctx context.Context) (bool, error) {
		pod, why := p.runningPod(ctx)
		if pod == nil {
			return false, errors.New(why)
		}
		if pod.UID == notUID {
			return false, errors.New("still the old plugin pod " + pod.Name)
		}
		b, err := p.c.Client.CoreV1().Pods(CSINamespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: RegistrarContainer}).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		if !bytes.Contains(b, []byte(`"registered"=true`)) {
			return false, fmt.Errorf("no successful registration status from kubelet in %s yet: %s", pod.Name, lastLine(string(b)))
		}
		cn, err := p.c.Client.StorageV1().CSINodes().Get(ctx, p.c.Opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == p.Driver {
				got = pod
				return true, nil
			}
		}
		return false, errors.New("driver not in CSINode yet")
	})
	return got, err
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndexByte(s, '\n')+1:]
}

// Pod returns the running plugin pod (both containers ready, not being deleted).
func (p *CSI) Pod(ctx context.Context) (*corev1.Pod, error) {
	pod, why := p.runningPod(ctx)
	if pod == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoPluginPod, why)
	}
	return pod, nil
}

// ErrNoPluginPod: the plugin's DaemonSet has no running pod.
var ErrNoPluginPod = errors.New("no running plugin pod")

func (p *CSI) runningPod(ctx context.Context) (*corev1.Pod, string) {
	pods, err := p.c.Client.CoreV1().Pods(CSINamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + p.Name()})
	if err != nil {
		return nil, err.Error()
	}
	var states []string
	for i := range pods.Items {
		pod := &pods.Items[i]
		ready := pod.Status.Phase == corev1.PodRunning && len(pod.Status.ContainerStatuses) == 2
		for _, s := range pod.Status.ContainerStatuses {
			ready = ready && s.Ready
		}
		if pod.DeletionTimestamp == nil && ready {
			return pod, ""
		}
		states = append(states, fmt.Sprintf("%s %s deleting=%v", pod.Name, pod.Status.Phase, pod.DeletionTimestamp != nil))
	}
	return nil, "plugin pods: [" + strings.Join(states, "; ") + "]"
}

// Kill deletes the running plugin pod and waits until the pod object is gone: its containers
// ended, and its s3fs with them (the mounts they served go dead). The DaemonSet brings a new pod;
// WaitRegistered with the returned UID waits for it.
func (p *CSI) Kill(ctx context.Context) (types.UID, error) {
	old, err := p.Pod(ctx)
	if err != nil {
		return "", err
	}
	return old.UID, p.deletePodGone(ctx, old)
}

// Restart is Kill, then WaitRegistered for the new pod.
func (p *CSI) Restart(ctx context.Context) (*corev1.Pod, error) {
	old, err := p.Kill(ctx)
	if err != nil {
		return nil, err
	}
	return p.WaitRegistered(ctx, old)
}

func (p *CSI) deletePodGone(ctx context.Context, old *corev1.Pod) error {
	cs := p.c.Client
	if err := cs.CoreV1().Pods(CSINamespace).Delete(ctx, old.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete plugin pod %s: %w", old.Name, err)
	}
	return p.c.Wait(ctx, p.c.Opts.Timeout, "plugin pod "+old.Name+" to be gone", func(ctx context.Context) (bool, error) {
		got, err := cs.CoreV1().Pods(CSINamespace).Get(ctx, old.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && got.UID != old.UID) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		return false, fmt.Errorf("phase %s", got.Status.Phase)
	})
}

// Stop keeps the plugin down: a nodeSelector no node matches makes the DaemonSet delete its pod
// (s3fs die with it) and start none, until Start lifts it.
func (p *CSI) Stop(ctx context.Context) error {
	cs := p.c.Client
	patch := `{"spec":{"template":{"spec":{"nodeSelector":{"pvrescue-e2e/csi-plugin-stopped":"true"}}}}}`
	if _, err := cs.AppsV1().DaemonSets(CSINamespace).Patch(ctx, p.Name(), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("stop DaemonSet %s: %w", p.Name(), err)
	}
	return p.c.Wait(ctx, p.c.Opts.Timeout, "the plugin pods of "+p.Name()+" to be gone", func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(CSINamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=" + p.Name()})
		if err != nil {
			return false, err
		}
		if len(pods.Items) > 0 {
			return false, fmt.Errorf("%d pod(s) left, e.g. %s %s", len(pods.Items), pods.Items[0].Name, pods.Items[0].Status.Phase)
		}
		return true, nil
	})
}

// Remove deletes the DaemonSet, waits until its pods are gone (their registrars remove their
// sockets, so kubelet unregisters the driver) and deletes the CSIDriver object.
func (p *CSI) Remove(ctx context.Context) error {
	cs := p.c.Client
	if err := p.Stop(ctx); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if err := cs.AppsV1().DaemonSets(CSINamespace).Delete(ctx, p.Name(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete DaemonSet %s: %w", p.Name(), err)
	}
	if err := cs.StorageV1().CSIDrivers().Delete(ctx, p.Driver, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete CSIDriver %s: %w", p.Driver, err)
	}
	return nil
}

// ContainerPids lists the host pids of the processes of the plugin pod's csi-s3 container whose
// /proc/<pid>/comm is comm ("" for all), found by the container's ID in /proc/<pid>/cgroup.
func (p *CSI) ContainerPids(ctx context.Context, comm string) ([]int, error) {
	pod, err := p.Pod(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == CSIContainer {
			_, id, ok := strings.Cut(s.ContainerID, "://")
			if !ok || id == "" {
				return nil, fmt.Errorf("%w: container %s of %s has no ID", ErrNoPluginPod, s.Name, pod.Name)
			}
			return ProcsInCgroup("/proc", id, comm), nil
		}
	}
	return nil, fmt.Errorf("%w: no %s container in %s", ErrNoPluginPod, CSIContainer, pod.Name)
}

// PluginPid is the host pid of the plugin process (the csi-s3 container's csi-s3-test).
func (p *CSI) PluginPid(ctx context.Context) (int, error) {
	pids, err := p.ContainerPids(ctx, "csi-s3-test")
	if err != nil {
		return 0, err
	}
	if len(pids) != 1 {
		return 0, fmt.Errorf("%w: %d csi-s3-test processes in its container: %v", ErrNoPluginPod, len(pids), pids)
	}
	return pids[0], nil
}

// ProcsInCgroup lists the live (not zombie) processes under procDir whose cgroup paths name the
// container id and whose comm is comm ("" for all), in pid order.
func ProcsInCgroup(procDir, id, comm string) []int {
	ents, _ := os.ReadDir(procDir)
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(procDir, e.Name())
		if comm != "" {
			c, err := os.ReadFile(filepath.Join(dir, "comm"))
			if err != nil || strings.TrimSpace(string(c)) != comm {
				continue
			}
		}
		cg, err := os.ReadFile(filepath.Join(dir, "cgroup"))
		if err != nil || !bytes.Contains(cg, []byte(id)) {
			continue
		}
		st, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(st[bytes.LastIndexByte(st, ')')+1:])); len(f) > 0 && f[0] == "Z" {
			continue
		}
		out = append(out, pid)
	}
	sort.Ints(out)
	return out
}

// Log returns the plugin container's log (for failure messages).
func (p *CSI) Log(ctx context.Context) string {
	pod, err := p.Pod(ctx)
	if err != nil {
		return err.Error()
	}
	b, err := p.c.Client.CoreV1().Pods(CSINamespace).GetLogs(pod.Name, &corev1.PodLogOptions{Container: CSIContainer}).DoRaw(ctx)
	if err != nil {
		return err.Error()
	}
	return string(b)
}

func ptr[T any](v T) *T { return &v }
