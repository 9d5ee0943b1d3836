//go:build linux

package stack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/e2e/cluster"
	"github.com/pvrescue/pvrescue/e2e/csis3"
)

// CSI is the test S3 CSI node plugin running as a host process.
//
// Deviation from a real deployment: drivers in the field run as a DaemonSet pod whose container
// holds s3fs. There is no driver image here, so the plugin runs on the host as a child of the
// suite; it behaves the same way for pvrescue (s3fs is its child, restarting it kills the mounts,
// kubelet talks to it through the registration and CSI sockets under /var/lib/kubelet).
type CSI struct {
	Opts *csis3.Options
	Bin  string
	// Name names the instance's log and pid files (csi-s3-test, csi-s3-test-<layout>).
	Name string
	c    *cluster.Cluster
	proc *cluster.Process
}

// DirectDriver is the driver name of the suite's first plugin (direct layout). The field names
// ru.yandex.s3.csi and ch.ctrox.csi.s3-driver are left to the instances imitating those drivers.
const DirectDriver = "csi-s3"

// BuildCSI compiles cmd csi-s3-test of the e2e module into the work dir.
func BuildCSI(ctx context.Context, c *cluster.Cluster, e2eDir string) (*CSI, error) {
	bin := filepath.Join(c.Opts.WorkDir, "bin", "csi-s3-test")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./csi-s3-test")
	cmd.Dir = e2eDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build csi-s3-test: %v\n%s", err, out)
	}
	o := csis3.NewOptions()
	o.NodeID = c.Opts.NodeName
	o.KubeletDir = c.Opts.KubeletDir
	o.Driver = DirectDriver
	o.StateDir = filepath.Join(c.Opts.WorkDir, "csi-s3-test")
	return &CSI{Opts: o, Bin: bin, Name: "csi-s3-test", c: c}, nil
}

// Sibling is another instance of the same plugin binary, under its own driver name and field
// layout (csis3.LayoutYandex, csis3.LayoutCtrox), with its own state dir and log. Start it.
func (p *CSI) Sibling(driver, layout string) *CSI {
	o := *p.Opts
	o.Driver, o.Layout = driver, layout
	name := "csi-s3-test-" + layout
	o.StateDir = filepath.Join(p.c.Opts.WorkDir, name)
	return &CSI{Opts: &o, Bin: p.Bin, Name: name, c: p.c}
}

// Pid is the plugin's process id (0 when it is not running).
func (p *CSI) Pid() int {
	if p.proc == nil || p.proc.Exited() != nil {
		return 0
	}
	return p.proc.Pid()
}

// Start starts the plugin, ensures its CSIDriver object, and waits until kubelet registered it.
func (p *CSI) Start(ctx context.Context) error {
	_, err := p.c.Client.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: p.Opts.Driver},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired: ptr(false), PodInfoOnMount: ptr(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CSIDriver %s: %w", p.Opts.Driver, err)
	}
	before := strings.Count(readFile(filepath.Join(p.c.Opts.LogDir(), p.Name+".log")), `"registered"=true`)
	p.proc, err = cluster.StartProcess(p.c.Opts.LogDir(), p.Name, p.Bin, []string{
		"--driver", p.Opts.Driver, "--node-id", p.Opts.NodeID, "--kubelet-dir", p.Opts.KubeletDir, "--state-dir", p.Opts.StateDir,
		"--layout", p.Opts.Layout,
	}, nil)
	if err != nil {
		return err
	}
	return p.c.Wait(ctx, p.c.Opts.Timeout, "kubelet to register the CSI plugin "+p.Opts.Driver, func(ctx context.Context) (bool, error) {
		if err := p.proc.Exited(); err != nil {
			return false, err
		}
		n := strings.Count(readFile(filepath.Join(p.c.Opts.LogDir(), p.Name+".log")), `"registered"=true`)
		if n <= before {
			return false, errors.New("no successful registration status from kubelet yet")
		}
		cn, err := p.c.Client.StorageV1().CSINodes().Get(ctx, p.c.Opts.NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, d := range cn.Spec.Drivers {
			if d.Name == p.Opts.Driver {
				return true, nil
			}
		}
		return false, errors.New("driver not in CSINode yet")
	})
}

// Restart kills the plugin (its s3fs children die with it: the mounts go dead) and starts it again.
func (p *CSI) Restart(ctx context.Context) error {
	if p.proc != nil {
		if err := p.proc.Kill(); err != nil {
			return err
		}
	}
	return p.Start(ctx)
}

// Kill stops the plugin for good.
func (p *CSI) Kill() error {
	if p.proc == nil {
		return nil
	}
	return p.proc.Kill()
}

// Remove stops the plugin (SIGTERM: it removes its sockets, so kubelet unregisters it) and
// deletes its CSIDriver object.
func (p *CSI) Remove(ctx context.Context) error {
	if p.proc != nil {
		if err := p.proc.Stop(5 * time.Second); err != nil {
			return err
		}
	}
	err := p.c.Client.StorageV1().CSIDrivers().Delete(ctx, p.Opts.Driver, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete CSIDriver %s: %w", p.Opts.Driver, err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

func readFile(p string) string { b, _ := os.ReadFile(p); return string(b) }
