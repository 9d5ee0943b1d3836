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
