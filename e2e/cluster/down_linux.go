//go:build linux

package cluster

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

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
	if c.PullRegistry != nil {
		errs = append(errs, c.PullRegistry.Close())
		c.PullRegistry = nil
	}
	errs = append(errs, detachNewForeignLoops(o.path(loopsBefore)))
	removeNewLoopNodes(o.path(loopsBefore))
	errs = append(errs, CleanHost(o.Bridge, append([]string{o.WorkDir, o.KubeletDir}, o.HostDirs...)...))
	if b, err := os.ReadFile(o.path(createdDirs)); err == nil {
		for _, d := range strings.Fields(string(b)) {
			if d == o.KubeletDir || slices.Contains(o.HostDirs, d) {
				errs = append(errs, os.RemoveAll(d)) //nolint:gosec // d is one of the cluster's own directories, checked just above
			}
		}
	}
	errs = append(errs, removeWorkDir(o.WorkDir, o.KeepLogs))
	return errors.Join(errs...)
}

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
//
// Two waves, because order matters to kubelet: the namespaces that run a DaemonSet (CSI node
// plugins, the local provisioner) go second, so a plugin is still there to unpublish the volumes
// of the app pods going first — removed together, an app pod whose plugin went first stays
// Terminating until the timeout (seen: 60 s in two suites). Pods are deleted with a 1 s grace
// period: the test images ignore SIGTERM, so their own grace (30 s by default) would only be a
// wait for SIGKILL.
func (c *Cluster) drain(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	nss, err := c.Client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	var apps, plugins []string
	for _, ns := range nss.Items {
		if systemNamespaces[ns.Name] || ns.Name == "pvrescue-system" {
			continue
		}
		dss, err := c.Client.AppsV1().DaemonSets(ns.Name).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil && len(dss.Items) > 0 {
			plugins = append(plugins, ns.Name)
		} else {
			apps = append(apps, ns.Name)
		}
	}
	c.Opts.logf("draining: deleting namespaces %v, then %v (they run DaemonSets), and every PV", apps, plugins)
	_ = c.Client.CoreV1().PersistentVolumes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	c.deleteNamespaces(ctx, apps)
	c.waitDrained(ctx, apps, false)
	c.deleteNamespaces(ctx, plugins)
	if c.waitDrained(ctx, append(apps, plugins...), true); ctx.Err() != nil {
		// Listed once more on a fresh deadline: a list cut short by the ended one says nothing.
		lctx, lcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer lcancel()
		left := c.waitDrained(lctx, append(apps, plugins...), true)
		c.Opts.logf("draining timed out after %s with %d pods/PVs left (%s); removing the rest by force", timeout, len(left), strings.Join(left, ", "))
	}
}

// deleteNamespaces deletes each namespace and then its pods with a 1 s grace period (after, so
// that no controller of a terminating namespace makes new ones).
func (c *Cluster) deleteNamespaces(ctx context.Context, nss []string) {
	grace := metav1.DeleteOptions{GracePeriodSeconds: ptrInt64(1)}
	for _, ns := range nss {
		_ = c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
		_ = c.Client.CoreV1().Pods(ns).DeleteCollection(ctx, grace, metav1.ListOptions{})
	}
}

// waitDrained waits until the namespaces have no pod left (and, with pvs, no PV is left either)
// or ctx ends, and returns what its last complete listing found, as kind/namespace/name.
func (c *Cluster) waitDrained(ctx context.Context, nss []string, pvs bool) []string {
	var left []string
	for {
		var now []string
		listed := true
		for _, ns := range nss {
			pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			listed = listed && err == nil
			if err == nil {
				for _, p := range pods.Items {
					now = append(now, "pod/"+ns+"/"+p.Name)
				}
			}
		}
		if pvs {
			list, err := c.Client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
			listed = listed && err == nil
			if err == nil {
				for _, pv := range list.Items {
					now = append(now, "pv/"+pv.Name)
				}
			}
		}
		if listed {
			left = now
			if len(left) == 0 {
				return nil
			}
		}
		if ctx.Err() != nil {
			return left
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func ptrInt64(v int64) *int64 { return &v }
