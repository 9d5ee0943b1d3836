package containermount_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/pvrescue/pvrescue/internal/testenv"
	"github.com/pvrescue/pvrescue/nodeagent"
	"github.com/pvrescue/pvrescue/nodeagent/containermount"
	"github.com/pvrescue/pvrescue/nodeagent/containermount/containermounttest"
)

const (
	uidDashed = "6f1a2b3c-4d5e-6f70-8192-a3b4c5d6e7f8"

	livePath = "/var/lib/kubelet/pods/" + uidDashed + "/volumes/kubernetes.io~csi/pv1/mount"
	deadDev  = "0:55"
	liveDev  = "0:60"
	hostNS   = 100
	agentNS  = 200
	agentPid = 50
)

// fakeCluster is one node with a pod of these containers:
//
//	app      ns 2  /data (rw, nosuid, HostToContainer: master:)
//	sub      ns 3  /cfg (subPath sub/dir, read-only)
//	c3+c4    ns 4  /data (one namespace shared by two containers)
//	fresh    ns 5  /data already covered by the live mount (left alone)
//	sandbox  ns 6  no volume
type fakeCluster struct {
	node *containermounttest.FakeNode
	pod  *corev1.Pod
}

func cg(id string) string {
	return "12:memory:/kubepods/burstable/pod" + uidDashed + "/" + id + "\n11:cpu:/kubepods/burstable/pod" + uidDashed + "/" + id + "\n"
}

func newFakeCluster(t *testing.T) *fakeCluster {
	t.Helper()
	n := containermounttest.NewFakeNode(agentPid)
	n.AddProc(1, containermounttest.FakeProc{Cgroup: "0::/init.scope", MountNS: hostNS, UserNS: 1})
	n.AddProc(agentPid, containermounttest.FakeProc{Cgroup: "0::/kubepods/besteffort/pod11111111-2222-3333-4444-555555555555/agent", MountNS: agentNS, UserNS: 1})
	n.AddProc(11, containermounttest.FakeProc{Cgroup: cg("sandbox"), MountNS: 6, UserNS: 1})
	n.AddProc(20, containermounttest.FakeProc{Cgroup: cg("app"), MountNS: 2, UserNS: 1})
	n.AddProc(21, containermounttest.FakeProc{Cgroup: cg("app"), MountNS: 2, UserNS: 1})
	n.AddProc(30, containermounttest.FakeProc{Cgroup: cg("sub"), MountNS: 3, UserNS: 1})
	n.AddProc(40, containermounttest.FakeProc{Cgroup: cg("c3"), MountNS: 4, UserNS: 1})
	n.AddProc(41, containermounttest.FakeProc{Cgroup: cg("c4"), MountNS: 4, UserNS: 1})
	n.AddProc(60, containermounttest.FakeProc{Cgroup: cg("fresh"), MountNS: 5, UserNS: 1})
	n.AddProc(70, containermounttest.FakeProc{Cgroup: "0::/system.slice/kubelet.service", MountNS: hostNS, UserNS: 1})
	must(t, n.SetTable(agentNS, `1 0 0:21 / / rw - overlay overlay rw
300 1 `+deadDev+` / `+livePath+` rw shared:5 - fuse.s3fs s3fs rw
301 300 `+liveDev+` / `+livePath+` rw shared:5 - fuse.s3fs s3fs rw
`))
	must(t, n.SetTable(2, `1 0 0:30 / / rw - overlay overlay rw
400 1 `+deadDev+` / /data rw,nosuid,nodev master:5 - fuse.s3fs s3fs rw
`))
	must(t, n.SetTable(3, `1 0 0:31 / / rw - overlay overlay rw
410 1 `+deadDev+` /sub/dir /cfg ro - fuse.s3fs s3fs rw
`))
	must(t, n.SetTable(4, `1 0 0:32 / / rw - overlay overlay rw
420 1 `+deadDev+` / /data rw - fuse.s3fs s3fs rw
`))
	must(t, n.SetTable(5, `1 0 0:33 / / rw - overlay overlay rw
430 1 `+deadDev+` / /data rw master:5 - fuse.s3fs s3fs rw
431 430 `+liveDev+` / /data rw master:5 - fuse.s3fs s3fs rw
`))
	must(t, n.SetTable(6, "1 0 0:34 / / rw - overlay overlay rw\n"))
	vol := func(mp, sub string, ro bool) []corev1.VolumeMount {
		return []corev1.VolumeMount{{Name: "vol", MountPath: mp, SubPath: sub, ReadOnly: ro}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: types.UID(uidDashed)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", VolumeMounts: append(vol("/data", "", false), corev1.VolumeMount{Name: "vol", MountPath: "/data/logs", SubPath: "logs2"})},
			{Name: "sub", VolumeMounts: vol("/cfg", "sub/dir", true)},
			{Name: "c3", VolumeMounts: vol("/data", "", false)},
			{Name: "c4", VolumeMounts: vol("/data/", "", false)},
			{Name: "fresh", VolumeMounts: vol("/data", "", false)},
			{Name: "ro-htc", VolumeMounts: append(vol("/data", "", true), corev1.VolumeMount{Name: "vol", MountPath: "/rw-data"})},
		}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", ContainerID: "containerd://app"},
			{Name: "sub", ContainerID: "containerd://sub"},
			{Name: "c3", ContainerID: "containerd://c3"},
			{Name: "c4", ContainerID: "containerd://c4"},
			{Name: "fresh", ContainerID: "containerd://fresh"},
		}},
	}
	return &fakeCluster{node: n, pod: pod}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

type harness struct {
	r       *containermount.Remounter
	rec     *record.FakeRecorder
	reg     *prometheus.Registry
	clock   *clocktesting.FakeClock
	metrics *containermount.Metrics
}

func newHarness(t *testing.T, os containermount.OS, opts containermount.Options) *harness {
	t.Helper()
	h := &harness{rec: record.NewFakeRecorder(20), reg: prometheus.NewRegistry(),
		clock: clocktesting.NewFakeClock(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))}
	r, err := containermount.New(nodeagent.Deps{Recorder: h.rec, Registerer: h.reg, Clock: h.clock}, os, opts)
	must(t, err)
	h.r, h.metrics = r, r.Metrics()
	return h
}

func (h *harness) events() []string {
	var out []string
	for {
		select {
		case e := <-h.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func ctxFor(t *testing.T) context.Context {
	return logr.NewContext(context.Background(), testr.New(t))
}

func (c *fakeCluster) req() containermount.RemountRequest {
	return containermount.RemountRequest{Pod: c.pod, DeadDevice: deadDev, DeadRoot: "/", LivePath: livePath}
}

func TestRemountFixesEveryContainerOnce(t *testing.T) {
	c := newFakeCluster(t)
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	wantFixed := []string{"app:/data", "sub:/cfg", "c3+c4:/data"}
	if strings.Join(res.Fixed, ",") != strings.Join(wantFixed, ",") || len(res.Failed) != 0 || res.Untouched != 1 {
		t.Fatalf("result = %+v, want fixed %v, no failures, 1 untouched", res, wantFixed)
	}
	if len(c.node.Violations) != 0 {
		t.Fatalf("safety violations: %v", c.node.Violations)
	}
	// One call per namespace that needed it: never the host's, the agent's, the sandbox's or the
	// already-live one's.
	var nss []uint64
	for _, call := range c.node.Calls {
		nss = append(nss, call.NS)
		if call.LivePath != livePath {
			t.Errorf("clone source %q, want %q", call.LivePath, livePath)
		}
	}
	if fmt.Sprint(nss) != "[2 3 4]" {
		t.Errorf("namespaces entered = %v, want [2 3 4]", nss)
	}
	// Each container now reaches the live connection at the right directory with its flags.
	for _, tc := range []struct {
		ns                uint64
		mp, root          string
		ro, nosuid, slave bool
	}{
		{2, "/data", "/", false, true, true},
		{3, "/cfg", "/sub/dir", true, false, false}, // subPath: its subdirectory, never the volume root
		{4, "/data", "/", false, false, false},
	} {
		top, _ := c.node.Table(tc.ns).Top(tc.mp)
		if top.Dev != liveDev || top.Root != tc.root || top.ReadOnly() != tc.ro || top.HasOption("nosuid") != tc.nosuid ||
			(len(top.Optional) > 0) != tc.slave {
			t.Errorf("ns %d %s: top = %+v; want live %s root %s ro=%v nosuid=%v slave=%v", tc.ns, tc.mp, top, liveDev, tc.root, tc.ro, tc.nosuid, tc.slave)
		}
		// Replaced, not stacked: the dead mount is gone, one mount at the path.
		if s := c.node.Table(tc.ns).Stack(tc.mp); len(s) != 1 {
			t.Errorf("ns %d %s: stack %+v, want only the live mount", tc.ns, tc.mp, s)
		}
	}
	if got := replaced(t, h.reg, "beneath", ""); got != 3 {
		t.Errorf("pvrescue_mount_replace_total{mode=beneath} = %v, want 3", got)
	}
	if got := counter(t, h.reg, "success", ""); got != 3 {
		t.Errorf("success counter = %v, want 3", got)
	}
	if got, _ := histogram(t, h.reg); got != 1 {
		t.Errorf("duration observed %d times, want 1", got)
	}
	ev := h.events()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Normal "+containermount.ReasonRestored) || !strings.Contains(ev[0], "app, sub, c3+c4") {
		t.Errorf("events = %q, want one %s naming app, sub, c3+c4", ev, containermount.ReasonRestored)
	}

	// A second pass finds nothing of the dead connection left but fresh's (live on top) and
	// changes nothing.
	calls := len(c.node.Calls)
	res, err = h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Fixed) != 0 || len(res.Failed) != 0 || res.Untouched != 1 || len(c.node.Calls) != calls {
		t.Errorf("second pass: %+v with %d new calls; want nothing fixed, 1 untouched, no calls", res, len(c.node.Calls)-calls)
	}
	if ev := h.events(); len(ev) != 0 {
		t.Errorf("second pass emitted events %q", ev)
	}
}

func TestRemountMeasuresRestoreToLastFixed(t *testing.T) {
	c := newFakeCluster(t)
	var h *harness
	slow := stepNS{inner: c.node.OS().NS, step: func(uint64) { h.clock.Step(250 * time.Millisecond) }}
	h = newHarness(t, containermount.OS{Proc: c.node.OS().Proc, NS: slow}, containermount.Options{})
	_, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	// Three namespaces at 250 ms each, observed once for the pass.
	if n, sum := histogram(t, h.reg); n != 1 || sum != 0.75 {
		t.Errorf("duration: %d observations, sum %v; want 1, 0.75", n, sum)
	}
}

// stepNS runs step before delegating, to move a fake clock or change the node mid-pass.
type stepNS struct {
	inner containermount.Namespaces
	step  func(ns uint64)
}

func (s stepNS) AttachInNamespace(ctx context.Context, ns containermount.NamespaceRef, live string, a []containermount.Attach) ([]containermount.Outcome, error) {
	s.step(ns.Inode)
	return s.inner.AttachInNamespace(ctx, ns, live, a)
}

func TestRemountReportsFailuresAndFixesTheOthers(t *testing.T) {
	c := newFakeCluster(t)
	// The kernel refuses to enter "sub"'s namespace; c3+c4's attach fails. (A user-namespaced
	// container's refusal is ErrLocked: TestRemountJudgesUserNamespacesFromTheKernel.)
	c.node.FailSetns[3] = errors.New("operation not permitted")
	c.node.FailAttach["/data"] = errors.New("invalid argument")
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Fixed) != 0 {
		t.Errorf("fixed = %v, want none (app and c3+c4 both mount /data, which fails)", res.Fixed)
	}
	if !errors.Is(res.Failed["sub:/cfg"], containermount.ErrSetns) {
		t.Errorf("sub:/cfg failure = %v, want ErrSetns", res.Failed["sub:/cfg"])
	}
	if !errors.Is(res.Failed["app:/data"], containermount.ErrAttach) || !errors.Is(res.Failed["c3+c4:/data"], containermount.ErrAttach) {
		t.Errorf("failures = %v, want ErrAttach for app:/data and c3+c4:/data", res.Failed)
	}
	if got := counter(t, h.reg, "failure", "setns"); got != 1 {
		t.Errorf("setns failures = %v, want 1", got)
	}
	if got := counter(t, h.reg, "failure", "attach"); got != 2 {
		t.Errorf("attach failures = %v, want 2", got)
	}
	if got, _ := histogram(t, h.reg); got != 0 {
		t.Errorf("duration observed %d times although nothing was fixed", got)
	}
	ev := h.events()
	if len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+containermount.ReasonFailed) || !strings.Contains(ev[0], "sub:/cfg") {
		t.Errorf("events = %q, want one warning naming sub:/cfg", ev)
	}

	// Once the causes are gone the next pass fixes all three.
	delete(c.node.FailSetns, 3)
	delete(c.node.FailAttach, "/data")
	res, err = h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Fixed) != 3 || len(res.Failed) != 0 {
		t.Errorf("retry: %+v, want 3 fixed", res)
	}
}

func TestRemountRefusesWithoutALiveMount(t *testing.T) {
	for name, table := range map[string]string{
		"nothing at the live path":  "1 0 0:21 / / rw - overlay overlay rw\n",
		"still the dead connection": "1 0 0:21 / / rw - overlay overlay rw\n300 1 " + deadDev + " / " + livePath + " rw - fuse.s3fs s3fs rw\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := newFakeCluster(t)
			must(t, c.node.SetTable(agentNS, table))
			h := newHarness(t, c.node.OS(), containermount.Options{})
			_, err := h.r.RemountInContainers(ctxFor(t), c.req())
			if !errors.Is(err, containermount.ErrNotRestored) {
				t.Errorf("err = %v, want ErrNotRestored", err)
			}
			if len(c.node.Calls) != 0 {
				t.Errorf("%d attach calls, want none", len(c.node.Calls))
			}
		})
	}
}

func TestRemountRejectsBadRequests(t *testing.T) {
	c := newFakeCluster(t)
	h := newHarness(t, c.node.OS(), containermount.Options{})
	for name, mutate := range map[string]func(*containermount.RemountRequest){
		"no pod":             func(r *containermount.RemountRequest) { r.Pod = nil },
		"no uid":             func(r *containermount.RemountRequest) { r.Pod = &corev1.Pod{} },
		"bad device":         func(r *containermount.RemountRequest) { r.DeadDevice = "55" },
		"relative live":      func(r *containermount.RemountRequest) { r.LivePath = "pods/x" },
		"relative dead root": func(r *containermount.RemountRequest) { r.DeadRoot = "sub" },
	} {
		req := c.req()
		mutate(&req)
		if _, err := h.r.RemountInContainers(ctxFor(t), req); !errors.Is(err, containermount.ErrBadRequest) {
			t.Errorf("%s: err = %v, want ErrBadRequest", name, err)
		}
	}
	if len(c.node.Calls) != 0 {
		t.Errorf("bad requests made %d attach calls", len(c.node.Calls))
	}
}

// A namespace whose container no status names cannot be held against the pod spec: it is skipped
// (named by pid), never remounted from its mount table alone.
func TestRemountSkipsUnidentifiedContainers(t *testing.T) {
	c := newFakeCluster(t)
	c.pod.Status.ContainerStatuses = nil // statuses not reported yet
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Fixed) != 0 || len(c.node.Calls) != 0 {
		t.Errorf("fixed %v with %d calls, want nothing", res.Fixed, len(c.node.Calls))
	}
	for _, k := range []string{"pid 20:/data", "pid 30:/cfg", "pid 40:/data"} {
		if !errors.Is(res.Failed[k], containermount.ErrUnverified) {
			t.Errorf("%s: %v, want ErrUnverified", k, res.Failed[k])
		}
	}
	if ev := h.events(); len(ev) != 1 || !strings.HasPrefix(ev[0], "Warning "+containermount.ReasonSkipped) || !strings.Contains(ev[0], "pid 30:/cfg") {
		t.Errorf("events = %q, want one %s", ev, containermount.ReasonSkipped)
	}
	if got := counter(t, h.reg, "failure", "unverified"); got != 3 {
		t.Errorf("unverified failures = %v, want 3", got)
	}
}

// Every way the pod spec (from the API) and a container's mount table can disagree: the container
// is skipped with a ContainerMountSkipped Event, nothing is attached in its namespace, and the
// other containers are still fixed.
func TestRemountSkipsContainersWhoseSpecDisagrees(t *testing.T) {
	for _, tc := range []struct {
		name string
		// edit changes the "sub" container (ns 3, /cfg) and/or its table.
		spec  func(c *corev1.Container, p *corev1.Pod)
		table string
		why   string
	}{
		{name: "mount table shows the volume root, spec a subPath",
			table: "410 1 " + deadDev + " / /cfg ro - fuse.s3fs s3fs rw", why: `shows "" of the volume, the pod spec's subPath is "sub/dir"`},
		{name: "mount table shows another subdirectory",
			table: "410 1 " + deadDev + " /other /cfg ro - fuse.s3fs s3fs rw", why: `shows "other"`},
		{name: "mount table shows a wider directory",
			table: "410 1 " + deadDev + " /sub /cfg ro - fuse.s3fs s3fs rw", why: `shows "sub"`},
		{name: "mount table shows writable, spec read-only",
			table: "410 1 " + deadDev + " /sub/dir /cfg rw - fuse.s3fs s3fs rw", why: "writable"},
		{name: "read-only from the claim, mount table writable",
			spec: func(c *corev1.Container, p *corev1.Pod) {
				c.VolumeMounts[0].ReadOnly, c.VolumeMounts[0].Name = false, "ro-claim"
				p.Spec.Volumes = []corev1.Volume{{Name: "ro-claim", VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "c", ReadOnly: true}}}}
			},
			table: "410 1 " + deadDev + " /sub/dir /cfg rw - fuse.s3fs s3fs rw", why: "writable"},
		{name: "no volumeMount at that path",
			spec: func(c *corev1.Container, _ *corev1.Pod) { c.VolumeMounts[0].MountPath = "/elsewhere" }, why: "no volumeMount"},
		{name: "subPathExpr",
			spec: func(c *corev1.Container, _ *corev1.Pod) {
				c.VolumeMounts[0].SubPath, c.VolumeMounts[0].SubPathExpr = "", "$(POD)"
			}, why: "subPathExpr"},
		{name: "container not in the spec",
			spec: func(c *corev1.Container, _ *corev1.Pod) { c.Name = "renamed" }, why: "no container of the pod spec"},
		{name: "a no-break space where the spec has none",
			table: "410 1 " + deadDev + " /sub/dir\u00a0 /cfg ro - fuse.s3fs s3fs rw", why: "shows \"sub/dir\\u00a0\""},
		{name: "another mount of the container disagrees",
			spec: func(c *corev1.Container, _ *corev1.Pod) {
				c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "vol", MountPath: "/root-ro", ReadOnly: true})
			},
			table: "410 1 " + deadDev + " /sub/dir /cfg ro - fuse.s3fs s3fs rw\n411 1 " + deadDev + " / /root-ro rw - fuse.s3fs s3fs rw",
			why:   "another mount of the container disagrees"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t)
			if tc.table != "" {
				must(t, c.node.SetTable(3, "1 0 0:31 / / rw - overlay overlay rw\n"+tc.table+"\n"))
			}
			if tc.spec != nil {
				tc.spec(&c.pod.Spec.Containers[1], c.pod)
			}
			before := containermounttest.FormatMountInfo(c.node.Table(3))
			h := newHarness(t, c.node.OS(), containermount.Options{})
			res, err := h.r.RemountInContainers(ctxFor(t), c.req())
			must(t, err)
			if strings.Join(res.Fixed, ",") != "app:/data,c3+c4:/data" {
				t.Errorf("fixed = %v, want the other containers fixed", res.Fixed)
			}
			if len(res.Failed) == 0 {
				t.Fatalf("nothing failed, want sub skipped")
			}
			for k, err := range res.Failed {
				if !strings.HasPrefix(k, "sub:") || !errors.Is(err, containermount.ErrUnverified) {
					t.Errorf("%s: %v, want only sub's mounts, ErrUnverified", k, err)
				}
			}
			for _, call := range c.node.Calls {
				if call.NS == 3 {
					t.Errorf("attached in the skipped container's namespace: %+v", call.Attaches)
				}
			}
			if got := containermounttest.FormatMountInfo(c.node.Table(3)); got != before {
				t.Errorf("the skipped container's table changed:\n%s", got)
			}
			var skipped []string
			for _, ev := range h.events() {
				if strings.HasPrefix(ev, "Warning "+containermount.ReasonSkipped) {
					skipped = append(skipped, ev)
				}
			}
			if len(skipped) != 1 || !strings.Contains(skipped[0], "sub:") || !strings.Contains(skipped[0], tc.why) {
				t.Errorf("skip events = %q, want one naming sub and %q", skipped, tc.why)
			}
			if len(c.node.Violations) != 0 {
				t.Errorf("violations: %v", c.node.Violations)
			}
		})
	}
}

// A read-only subPath whose name holds the bytes a tenant can choose (no-break spaces around a
// "/data rw" that once parsed as separate fields) is restored at exactly that subdirectory,
// read-only: the spec and the exact mount table agree.
func TestRemountOddSubPathStaysItsSubdirectoryReadOnly(t *testing.T) {
	c := newFakeCluster(t)
	sub := "\u00a0/data\u00a0rw\r\v\u0085"
	mp := "/d\u00a0a\rt\va"
	must(t, c.node.SetTable(3, "1 0 0:31 / / rw - overlay overlay rw\n410 1 "+deadDev+" /"+sub+" "+mp+" ro,relatime - fuse.s3fs s3fs rw\n"))
	c.pod.Spec.Containers[1].VolumeMounts = []corev1.VolumeMount{{Name: "vol", MountPath: mp, SubPath: sub, ReadOnly: true}}
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if !contains(res.Fixed, "sub:"+mp) || len(res.Failed) != 0 {
		t.Fatalf("result %+v, want sub:%q fixed", res, mp)
	}
	top, _ := c.node.Table(3).Top(mp)
	if top.Dev != liveDev || top.Root != "/"+sub || !top.ReadOnly() {
		t.Errorf("top at %q = %+v, want live root %q read-only", mp, top, "/"+sub)
	}
	if len(c.node.Violations) != 0 {
		t.Errorf("violations: %v", c.node.Violations)
	}
}

// A live mount propagated in writable where the spec makes the mount read-only is made read-only
// in place even when the dead mount's own line showed it writable.
func TestRemountReprotectsFromTheSpec(t *testing.T) {
	c := newFakeCluster(t)
	c.node.AddProc(80, containermounttest.FakeProc{Cgroup: cg("ro-htc"), MountNS: 8, UserNS: 1})
	must(t, c.node.SetTable(8, `1 0 0:35 / / rw - overlay overlay rw
440 1 `+deadDev+` / /data rw master:5 - fuse.s3fs s3fs rw
441 440 `+liveDev+` / /data rw master:5 - fuse.s3fs s3fs rw
`))
	c.pod.Status.ContainerStatuses = append(c.pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: "ro-htc", ContainerID: "containerd://ro-htc"})
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if !contains(res.Fixed, "ro-htc:/data") {
		t.Fatalf("result %+v, want ro-htc:/data made read-only", res)
	}
	if top, _ := c.node.Table(8).Top("/data"); top.ID != 441 || !top.ReadOnly() {
		t.Errorf("/data top = %+v, want mount 441 read-only", top)
	}
}

func TestSpecMounts(t *testing.T) {
	yes := true
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "i", VolumeMounts: []corev1.VolumeMount{{Name: "csi", MountPath: "/i/"}}}},
		Containers: []corev1.Container{{Name: "a", VolumeMounts: []corev1.VolumeMount{
			{Name: "v", MountPath: "/a", SubPath: "x/y/"}, {Name: "v", MountPath: "/b", SubPathExpr: "$(X)"}}}},
		EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "e",
			VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/e", ReadOnly: true}}}}},
		Volumes: []corev1.Volume{{Name: "csi", VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: "d", ReadOnly: &yes}}}},
	}}
	got, ok := containermount.SpecMounts(pod, []string{"a", "i", "e"})
	want := map[string][]containermount.SpecMount{"/a": {{Volume: "v", SubPath: "x/y"}}, "/b": {{Volume: "v", Expr: true}},
		"/i": {{Volume: "csi", ReadOnly: true}}, "/e": {{Volume: "v", ReadOnly: true}}}
	if !ok || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("SpecMounts = %v %v, want %v", got, ok, want)
	}
	if _, ok := containermount.SpecMounts(pod, []string{"a", "missing"}); ok {
		t.Error("a name not in the spec was accepted")
	}
	if _, ok := containermount.SpecMounts(pod, nil); ok {
		t.Error("no names was accepted")
	}
}

func TestRemountSkipsGoneAndChangedTargets(t *testing.T) {
	c := newFakeCluster(t)
	// Between planning and attaching: app's processes exit; c3+c4 get another mount on /data.
	ns := stepNS{inner: c.node.OS().NS, step: func(ns uint64) {
		if ns == 2 {
			c.node.RemoveProc(20)
			c.node.RemoveProc(21)
		}
		tab := c.node.Table(4)
		if top, _ := tab.Top("/data"); ns == 4 && top.ID == 420 {
			tab = append(tab, containermount.Mount{ID: 421, ParentID: 420, Dev: "0:99", Root: "/", MountPoint: "/data", Options: []string{"rw"}, FSType: "tmpfs"})
			must(t, c.node.SetTable(4, containermounttest.FormatMountInfo(tab)))
		}
	}}
	h := newHarness(t, containermount.OS{Proc: c.node.OS().Proc, NS: ns}, containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if !errors.Is(res.Failed["app:/data"], containermount.ErrNamespaceGone) || !errors.Is(res.Failed["c3+c4:/data"], containermount.ErrTargetChanged) {
		t.Errorf("failed = %v; want app namespace gone, c3+c4 target changed", res.Failed)
	}
	if strings.Join(res.Fixed, ",") != "sub:/cfg" {
		t.Errorf("fixed = %v, want sub:/cfg", res.Fixed)
	}
	if top, _ := c.node.Table(4).Top("/data"); top.ID != 421 {
		t.Errorf("the mount that appeared on /data was covered: top = %+v", top)
	}
	if len(c.node.Violations) != 0 {
		t.Errorf("violations: %v", c.node.Violations)
	}
}

// liarNS reports success without attaching anything.
type liarNS struct{}

func (liarNS) AttachInNamespace(_ context.Context, _ containermount.NamespaceRef, _ string, a []containermount.Attach) ([]containermount.Outcome, error) {
	return make([]containermount.Outcome, len(a)), nil
}

func TestRemountVerifiesTheResult(t *testing.T) {
	c := newFakeCluster(t)
	h := newHarness(t, containermount.OS{Proc: c.node.OS().Proc, NS: liarNS{}}, containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Fixed) != 0 || len(res.Failed) != 3 {
		t.Fatalf("result = %+v; want all 3 failed verification", res)
	}
	for k, err := range res.Failed {
		if !errors.Is(err, containermount.ErrVerify) {
			t.Errorf("%s: %v, want ErrVerify", k, err)
		}
	}
}

// blockNS blocks until its context ends, as a hung kernel call would.
type blockNS struct{}

func (blockNS) AttachInNamespace(ctx context.Context, _ containermount.NamespaceRef, _ string, _ []containermount.Attach) ([]containermount.Outcome, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestRemountBoundsEachNamespace(t *testing.T) {
	c := newFakeCluster(t)
	h := newHarness(t, containermount.OS{Proc: c.node.OS().Proc, NS: blockNS{}}, containermount.Options{NamespaceTimeout: time.Millisecond})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Failed) != 3 {
		t.Fatalf("failed = %v, want 3", res.Failed)
	}
	if got := counter(t, h.reg, "failure", "timeout"); got != 3 {
		t.Errorf("timeout failures = %v, want 3", got)
	}
}

func TestNewValidates(t *testing.T) {
	c := newFakeCluster(t)
	if _, err := containermount.New(nodeagent.Deps{}, c.node.OS(), containermount.Options{NamespaceTimeout: -time.Second}); err == nil {
		t.Error("negative timeout accepted")
	}
	if _, err := containermount.New(nodeagent.Deps{}, containermount.OS{}, containermount.Options{}); err == nil {
		t.Error("empty OS accepted")
	}
	// Two remounters on one registry share the collectors.
	reg := prometheus.NewRegistry()
	a, err := containermount.New(nodeagent.Deps{Registerer: reg}, c.node.OS(), containermount.Options{})
	must(t, err)
	b, err := containermount.New(nodeagent.Deps{Registerer: reg}, c.node.OS(), containermount.Options{})
	must(t, err)
	if a.Metrics().Remounts != b.Metrics().Remounts {
		t.Error("second remounter registered its own counter")
	}
}

func TestReason(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("%w: %w", containermount.ErrLocked, containermount.ErrSetns): "userns_locked",
		fmt.Errorf("x: %w", containermount.ErrSetns):                            "setns",
		fmt.Errorf("x: %w", context.DeadlineExceeded):                           "timeout",
		fmt.Errorf("x: %w", containermount.ErrOutsideVolume):                    "outside_volume",
		errors.New("boom"): "other",
	} {
		if got := containermount.Reason(err); got != want {
			t.Errorf("Reason(%v) = %q, want %q", err, got, want)
		}
	}
}

// histogram returns the sample count and sum of the duration histogram.
func histogram(t *testing.T, reg *prometheus.Registry) (uint64, float64) {
	t.Helper()
	m, err := testenv.FindMetric(reg, "pvrescue_container_remount_duration_seconds", nil)
	must(t, err)
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// replaced returns pvrescue_mount_replace_total{mode,reason} (0 when absent).
func replaced(t *testing.T, reg *prometheus.Registry, mode, reason string) float64 {
	t.Helper()
	m, err := testenv.FindMetric(reg, "pvrescue_mount_replace_total", map[string]string{"mode": mode, "reason": reason})
	if errors.Is(err, testenv.ErrNoMetric) {
		return 0
	}
	must(t, err)
	return testenv.MetricValue(m)
}

// counter returns pvrescue_container_remounts_total{result,reason} (0 when absent).
func counter(t *testing.T, reg *prometheus.Registry, result, reason string) float64 {
	t.Helper()
	m, err := testenv.FindMetric(reg, "pvrescue_container_remounts_total", map[string]string{"result": result, "reason": reason})
	if errors.Is(err, testenv.ErrNoMetric) {
		return 0
	}
	must(t, err)
	return testenv.MetricValue(m)
}

func TestRemountNeedsHostPID(t *testing.T) {
	c := newFakeCluster(t)
	c.node.SelfPid = 1 // the agent is pid 1 of a PID namespace of its own
	h := newHarness(t, c.node.OS(), containermount.Options{})
	if _, err := h.r.RemountInContainers(ctxFor(t), c.req()); !errors.Is(err, containermount.ErrNoHostPID) {
		t.Errorf("err = %v, want ErrNoHostPID", err)
	}
	if len(c.node.Calls) != 0 {
		t.Errorf("%d attach calls without hostPID", len(c.node.Calls))
	}
}

func TestRemountConcurrentPassesFixOnce(t *testing.T) {
	c := newFakeCluster(t)
	h := newHarness(t, c.node.OS(), containermount.Options{})
	results := make(chan containermount.RemountResult, 2)
	for i := 0; i < 2; i++ {
		go func() {
			res, err := h.r.RemountInContainers(ctxFor(t), c.req())
			if err != nil {
				t.Error(err)
			}
			results <- res
		}()
	}
	a, b := <-results, <-results
	if len(a.Fixed)+len(b.Fixed) != 3 || len(a.Failed)+len(b.Failed) != 0 || a.Untouched+b.Untouched != 1+1 {
		t.Errorf("two concurrent passes: %+v and %+v; want 3 fixed in total, no failures", a, b)
	}
	if len(c.node.Violations) != 0 {
		t.Errorf("violations: %v", c.node.Violations)
	}
}

// slowForeign makes the first read of a foreign namespace's mount table (MountInfoUpTo) wait
// for release, as a read of a tenant's huge or contended table would.
type slowForeign struct {
	containermount.ProcFS
	entered, release chan struct{}
	reads            atomic.Int32
}

func (s *slowForeign) MountInfoUpTo(pid, _ int) (string, error) {
	if s.reads.Add(1) == 1 {
		close(s.entered)
		<-s.release
	}
	return s.MountInfo(pid)
}

// A foreign namespace's mount table is read, and its Event sent, after the pass releases the
// node-wide lock: another pass is not held up by it.
func TestRemountReadsForeignNamespacesOutsideTheLock(t *testing.T) {
	c := newFakeCluster(t)
	c.node.AddProc(22, containermounttest.FakeProc{Cgroup: cg("app"), MountNS: 9, UserNS: 99, UserNSParent: 1, PPid: 20, StartTime: 5})
	must(t, c.node.SetTable(9, "1 0 0:30 / / rw - overlay overlay rw\n490 1 "+deadDev+" / /data rw - fuse.s3fs s3fs rw\n"))
	os := c.node.OS()
	slow := &slowForeign{ProcFS: os.Proc, entered: make(chan struct{}), release: make(chan struct{})}
	os.Proc = slow
	h := newHarness(t, os, containermount.Options{})
	first := make(chan containermount.RemountResult, 1)
	go func() {
		res, err := h.r.RemountInContainers(ctxFor(t), c.req())
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	<-slow.entered
	second := make(chan error, 1)
	go func() {
		_, err := h.r.RemountInContainers(ctxFor(t), c.req())
		second <- err
	}()
	select {
	case err := <-second:
		must(t, err)
	case <-time.After(5 * time.Second):
		t.Error("a second pass waited for the first pass's read of a foreign namespace")
	}
	close(slow.release)
	res := <-first
	if key := "app (mount namespace 9 of pid 22):/data"; !errors.Is(res.Failed[key], containermount.ErrNotRuntimeNamespace) {
		t.Errorf("first pass failed = %v; want %s skipped", res.Failed, key)
	}
	if len(res.Fixed) != 3 {
		t.Errorf("first pass fixed %v, want 3", res.Fixed)
	}
}

// The fake itself must catch the breaches it exists to catch.
func TestFakeNodeRecordsViolations(t *testing.T) {
	c := newFakeCluster(t)
	ns := c.node.OS().NS
	_, err := ns.AttachInNamespace(context.Background(), containermount.NamespaceRef{Inode: agentNS, Pids: []int{agentPid}, Owner: 1}, livePath, nil)
	must(t, err)
	errs, err := ns.AttachInNamespace(context.Background(), containermount.NamespaceRef{Inode: 2, Pids: []int{20}, Owner: 1}, livePath,
		[]containermount.Attach{{Offset: "../escape", Target: "/data", ExpectMountID: 400}})
	must(t, err)
	if len(c.node.Violations) != 2 || !errors.Is(errs[0].Err, containermount.ErrSource) {
		t.Errorf("violations = %q, errs = %v; want the agent's namespace and the escaping offset recorded", c.node.Violations, errs)
	}
	if top, _ := c.node.Table(2).Top("/data"); top.ID != 400 {
		t.Errorf("an escaping offset was attached: %+v", top)
	}
}

func TestRemountNeverWidensTheLiveMount(t *testing.T) {
	c := newFakeCluster(t)
	// The host restored the target read-only (a read-only PV); app's dead mount was writable.
	must(t, c.node.SetTable(agentNS, `1 0 0:21 / / rw - overlay overlay rw
300 1 `+deadDev+` / `+livePath+` rw - fuse.s3fs s3fs rw
301 300 `+liveDev+` / `+livePath+` ro - fuse.s3fs s3fs rw
`))
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Fixed) != 3 || len(res.Failed) != 0 {
		t.Fatalf("result = %+v, want 3 fixed", res)
	}
	if top, _ := c.node.Table(2).Top("/data"); !top.ReadOnly() {
		t.Errorf("app's /data became writable although the live mount is read-only: %+v", top)
	}
}

func TestRemountNestedMountPoints(t *testing.T) {
	c := newFakeCluster(t)
	// app mounts the volume at /data and the subPath logs2 at /data/logs, on top of it.
	must(t, c.node.SetTable(2, `1 0 0:30 / / rw - overlay overlay rw
400 1 `+deadDev+` / /data rw - fuse.s3fs s3fs rw
401 400 `+deadDev+` /logs2 /data/logs rw - fuse.s3fs s3fs rw
`))
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if !strings.Contains(strings.Join(res.Fixed, ","), "app:/data,app:/data/logs") || len(res.Failed) != 0 {
		t.Fatalf("result = %+v; want app:/data and app:/data/logs fixed", res)
	}
	tab := c.node.Table(2)
	outer, _ := tab.Reach("/data")
	inner, _ := tab.Reach("/data/logs")
	if outer.Dev != liveDev || outer.Root != "/" || inner.Dev != liveDev || inner.Root != "/logs2" || inner.ParentID != outer.ID {
		t.Errorf("after the pass: /data %+v, /data/logs %+v; want the subPath nested inside the live /data", outer, inner)
	}
	// The outer dead mount has the inner one on it: detaching it would take the inner along, so
	// it is stacked over (said by the metric), and until the next round nests the subPath again
	// /data/logs shows the volume's own directory — the one window the fallback leaves.
	if got := replaced(t, h.reg, "stacked", "submounts"); got != 1 {
		t.Errorf("pvrescue_mount_replace_total{stacked,submounts} = %v, want 1", got)
	}
	if len(c.node.Violations) != 1 || !strings.Contains(c.node.Violations[0], "/data/logs bare") {
		t.Errorf("violations: %v; want only the nested subPath's window", c.node.Violations)
	}
	// Idempotent: nothing left to do.
	res, err = h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Fixed) != 0 || len(res.Failed) != 0 {
		t.Errorf("second pass: %+v", res)
	}
}

// A container whose volume mount is read-only and HostToContainer receives the host's
// restored (writable) mount by propagation. The remounter makes that propagated mount read-only
// in place — no clone attached, never the host's mount — and leaves a read-only one alone.
func TestRemountMakesAPropagatedMountReadOnlyAgain(t *testing.T) {
	c := newFakeCluster(t)
	c.node.AddProc(80, containermounttest.FakeProc{Cgroup: cg("ro-htc"), MountNS: 8, UserNS: 1})
	must(t, c.node.SetTable(8, `1 0 0:35 / / rw - overlay overlay rw
440 1 `+deadDev+` / /data ro,nosuid master:5 - fuse.s3fs s3fs rw
441 440 `+liveDev+` / /data rw,nosuid master:5 - fuse.s3fs s3fs rw
442 1 `+deadDev+` / /rw-data rw master:5 - fuse.s3fs s3fs rw
443 442 `+liveDev+` / /rw-data rw master:5 - fuse.s3fs s3fs rw
`))
	c.pod.Status.ContainerStatuses = append(c.pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: "ro-htc", ContainerID: "containerd://ro-htc"})
	hostBefore := containermounttest.FormatMountInfo(c.node.Table(agentNS))
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if !contains(res.Fixed, "ro-htc:/data") || contains(res.Fixed, "ro-htc:/rw-data") || len(res.Failed) != 0 {
		t.Fatalf("result = %+v, want ro-htc:/data fixed, /rw-data untouched, no failures", res)
	}
	tab := c.node.Table(8)
	if top, _ := tab.Top("/data"); top.ID != 441 || !top.ReadOnly() || !top.HasOption("nosuid") {
		t.Errorf("/data top = %+v, want mount 441 read-only, nosuid kept", top)
	}
	if top, _ := tab.Top("/rw-data"); top.ID != 443 || top.ReadOnly() {
		t.Errorf("/rw-data top = %+v, want mount 443 still writable (its container mount was rw)", top)
	}
	if len(tab) != 5 {
		t.Errorf("namespace has %d mounts, want 5: nothing attached for a read-only fix", len(tab))
	}
	if got := containermounttest.FormatMountInfo(c.node.Table(agentNS)); got != hostBefore {
		t.Errorf("the agent's own table changed:\n%s", got)
	}
	if len(c.node.Violations) != 0 {
		t.Fatalf("safety violations: %v", c.node.Violations)
	}
	// A second pass finds it read-only and does nothing there.
	res, err = h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Fixed) != 0 || len(res.Failed) != 0 {
		t.Errorf("second pass: %+v, want nothing fixed or failed", res)
	}
}

func TestPlanReprotect(t *testing.T) {
	for _, tc := range []struct {
		name, table string
		want        []containermount.Target
		live        []string
	}{
		{name: "read-only dead, writable live on top", table: `440 1 0:55 / /data ro master:5 - fuse.s3fs s3fs rw
441 440 0:60 / /data rw master:5 - fuse.s3fs s3fs rw`, want: []containermount.Target{{MountPoint: "/data", DeadMountID: 441, ReadOnly: true, Reprotect: true}}},
		{name: "read-only live already", table: `440 1 0:55 / /data ro master:5 - fuse.s3fs s3fs rw
441 440 0:60 / /data ro master:5 - fuse.s3fs s3fs rw`, live: []string{"/data"}},
		{name: "writable dead", table: `440 1 0:55 / /data rw master:5 - fuse.s3fs s3fs rw
441 440 0:60 / /data rw master:5 - fuse.s3fs s3fs rw`, live: []string{"/data"}},
		{name: "something else on top", table: `440 1 0:55 / /data ro master:5 - fuse.s3fs s3fs rw
441 440 0:77 / /data rw - tmpfs tmpfs rw`, live: []string{"/data"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tab, err := containermount.ParseMountInfo("1 0 0:21 / / rw - overlay overlay rw\n" + tc.table)
			must(t, err)
			p := containermount.PlanNamespace(tab, "0:55", "/", "0:60")
			if fmt.Sprint(p.Targets) != fmt.Sprint(tc.want) || fmt.Sprint(p.Live) != fmt.Sprint(tc.live) {
				t.Errorf("plan = targets %+v live %v; want targets %+v live %v", p.Targets, p.Live, tc.want, tc.live)
			}
		})
	}
}

func contains(s []string, v string) bool { return slices.Contains(s, v) }

// Where the kernel cannot mount beneath (older than 6.5) or refuses at one path, the live mount
// is stacked on the dead one, counted by mode and reason: no silent mixture.
func TestRemountFallsBackToStacking(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(n *containermounttest.FakeNode)
		want  map[[2]string]float64
		depth map[string]int // "<ns>:<mount point>" → mounts at it
	}{
		{"kernel older than 6.5", func(n *containermounttest.FakeNode) { n.NoBeneath = true },
			map[[2]string]float64{{"stacked", "unsupported"}: 3, {"beneath", ""}: 0},
			map[string]int{"2:/data": 2, "3:/cfg": 2, "4:/data": 2}},
		{"kernel refuses at one path", func(n *containermounttest.FakeNode) { n.Refuse["/cfg"] = true },
			map[[2]string]float64{{"stacked", "refused"}: 1, {"beneath", ""}: 2},
			map[string]int{"2:/data": 1, "3:/cfg": 2, "4:/data": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newFakeCluster(t)
			tc.setup(c.node)
			h := newHarness(t, c.node.OS(), containermount.Options{})
			res, err := h.r.RemountInContainers(ctxFor(t), c.req())
			must(t, err)
			if len(res.Fixed) != 3 || len(res.Failed) != 0 {
				t.Fatalf("result %+v; want 3 fixed", res)
			}
			for k, want := range tc.want {
				if got := replaced(t, h.reg, k[0], k[1]); got != want {
					t.Errorf("pvrescue_mount_replace_total{mode=%q,reason=%q} = %v, want %v", k[0], k[1], got, want)
				}
			}
			for _, ns := range []uint64{2, 3, 4} {
				for _, mp := range []string{"/data", "/cfg"} {
					want, ok := tc.depth[fmt.Sprintf("%d:%s", ns, mp)]
					if !ok {
						continue
					}
					s := c.node.Table(ns).Stack(mp)
					if len(s) != want || s[len(s)-1].Dev != liveDev {
						t.Errorf("ns %d %s: stack %+v; want %d mounts, live on top", ns, mp, s, want)
					}
				}
			}
			if top, _ := c.node.Table(3).Top("/cfg"); !top.ReadOnly() || top.Root != "/sub/dir" {
				t.Errorf("subPath /cfg: %+v; want its read-only subdirectory", top)
			}
			if len(c.node.Violations) != 0 {
				t.Errorf("violations: %v", c.node.Violations)
			}
		})
	}
}

// The host's dead mount was replaced (beneath) before the containers: a HostToContainer
// container's dead mount lost its master and shows private. The pod spec says HostToContainer,
// so the new mount is a slave of the live mount's group again; a None container's stays private.
func TestRemountTakesPropagationFromTheSpec(t *testing.T) {
	c := newFakeCluster(t)
	htc := corev1.MountPropagationHostToContainer
	c.pod.Spec.Containers[2].VolumeMounts[0].MountPropagation = &htc // c3 (ns 4, shared with c4)
	h := newHarness(t, c.node.OS(), containermount.Options{})
	res, err := h.r.RemountInContainers(ctxFor(t), c.req())
	must(t, err)
	if len(res.Fixed) != 3 || len(res.Failed) != 0 {
		t.Fatalf("result %+v; want 3 fixed", res)
	}
	for ns, want := range map[uint64]string{4: "[master:5]", 3: "[]"} {
		mp := map[uint64]string{4: "/data", 3: "/cfg"}[ns]
		top, _ := c.node.Table(ns).Top(mp)
		if fmt.Sprint(top.Optional) != want {
			t.Errorf("ns %d %s: propagation %v, want %s", ns, mp, top.Optional, want)
		}
	}
}
