package charts_test

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"github.com/pvrescue/pvrescue/charts"
)

// agent.extraArgs and webhook.extraArgs reach the containers after the chart's own flags, and the
// agent's host mounts follow config.localBlock.pathRoots (every root outside /dev, read-only).
func TestExtraArgsAndPathRoots(t *testing.T) {
	v := map[string]any{}
	if err := yaml.Unmarshal([]byte(`
agent:
  extraArgs: ["--zap-devel", "--zap-log-level=debug"]
webhook:
  extraArgs: ["--zap-log-level=debug"]
config:
  localBlock:
    pathRoots: ["/dev/disk", "/srv/local_disks", "/mnt/disks"]
`), &v); err != nil {
		t.Fatal(err)
	}
	objs := render(t, v, charts.DefaultRelease())
	var ds appsv1.DaemonSet
	find(t, objs, "DaemonSet", "pvrescue-agent", &ds)
	args := ds.Spec.Template.Spec.Containers[0].Args
	if n := len(args); n < 2 || args[n-2] != "--zap-devel" || args[n-1] != "--zap-log-level=debug" {
		t.Errorf("agent args %q: want the extraArgs last", args)
	}
	var d appsv1.Deployment
	find(t, objs, "Deployment", "pvrescue-webhook", &d)
	if wargs := d.Spec.Template.Spec.Containers[0].Args; wargs[len(wargs)-1] != "--zap-log-level=debug" || wargs[0] != "serve" {
		t.Errorf("webhook args %q", wargs)
	}
	mounts := map[string]string{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		if !m.ReadOnly {
			continue
		}
		mounts[m.Name] = m.MountPath
	}
	hosts := map[string]string{}
	for _, vol := range ds.Spec.Template.Spec.Volumes {
		if vol.HostPath != nil {
			hosts[vol.Name] = vol.HostPath.Path
		}
	}
	for name, p := range map[string]string{"srv-local-disks": "/srv/local_disks", "mnt-disks": "/mnt/disks"} {
		if mounts[name] != p || hosts[name] != p {
			t.Errorf("pathRoot %s: mount %q, hostPath %q, want both %s", p, mounts[name], hosts[name], p)
		}
	}
	if _, ok := hosts["mnt-fast-disks"]; ok {
		t.Error("/mnt/fast-disks is mounted though pathRoots no longer lists it")
	}
	for name := range hosts {
		if slices.Contains([]string{"dev-disk"}, name) {
			t.Errorf("a root under /dev got a mount of its own (%s): /dev is mounted whole", name)
		}
	}
	// two roots with one name are refused
	v["config"] = map[string]any{"localBlock": map[string]any{"pathRoots": []any{"/mnt/a_b", "/mnt/a-b"}}}
	if _, err := charts.Render(load(t), v, charts.DefaultRelease()); err == nil {
		t.Error("pathRoots /mnt/a_b and /mnt/a-b (one volume name) rendered")
	}
}
