package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/webhook"
)

func snapshot() *Snapshot {
	return &Snapshot{Config: config.Default(), Lookup: webhook.NewStaticLookup(),
		NamespaceSelector: labels.Everything(), ObjectSelector: labels.Everything()}
}

func TestStatusConditionParsing(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	s := snapshot()
	s.Nodes = []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "ok"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: "LocalDiskMissing", Status: corev1.ConditionFalse, Message: "every watched local block volume has its disk"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "odd"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: "LocalDiskMissing", Status: corev1.ConditionTrue, Message: "something else"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "missing"}, Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: "LocalDiskMissing", Status: corev1.ConditionTrue, Message: "local disks missing for PVs: b, a", LastTransitionTime: metav1.NewTime(at)}}}},
	}
	// A fake on a PV without node affinity lands under <unknown>.
	s.PVs = []corev1.PersistentVolume{{ObjectMeta: metav1.ObjectMeta{Name: "a", Annotations: map[string]string{contract.AnnotationFakeDevice: "/dev/loop102"}}}}
	r := BuildStatus(context.Background(), s)
	var got []string
	for _, n := range r.Nodes {
		for _, it := range n.Items {
			got = append(got, n.Name+" "+it.Kind+" "+it.PV)
		}
		if len(n.Items) == 0 {
			got = append(got, n.Name+" ok")
		}
	}
	want := []string{"<unknown> fake-device a", "missing disk-missing a", "missing disk-missing b", "odd ok", "ok ok"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	var out bytes.Buffer
	if err := PrintStatus(&out, OutputTable, at.Add(90*time.Second), r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "missing    disk-missing  a") || !strings.Contains(out.String(), "90s") || !strings.Contains(out.String(), "Unprotected pods: none") {
		t.Errorf("table:\n%s", out.String())
	}
}

func TestEventTime(t *testing.T) {
	a, b, c := time.Unix(100, 0), time.Unix(200, 0), time.Unix(300, 0)
	for _, tc := range []struct {
		ev   corev1.Event
		want time.Time
	}{
		{corev1.Event{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(a)}}, a},
		{corev1.Event{EventTime: metav1.NewMicroTime(b), ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(a)}}, b},
		{corev1.Event{LastTimestamp: metav1.NewTime(c), EventTime: metav1.NewMicroTime(b)}, c},
		{corev1.Event{Series: &corev1.EventSeries{LastObservedTime: metav1.NewMicroTime(c)}, EventTime: metav1.NewMicroTime(a)}, c},
	} {
		if got := eventTime(&tc.ev); !got.Equal(tc.want) {
			t.Errorf("eventTime = %v, want %v", got, tc.want)
		}
	}
}

func TestMountEventsOnlyFromTheAgent(t *testing.T) {
	s := snapshot()
	ref := corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"}
	s.Events = []corev1.Event{
		{InvolvedObject: ref, Reason: "MountRestored", Message: "S3 volume pv-1 mounted again", Source: corev1.EventSource{Component: "someone-else"}},
		{InvolvedObject: ref, Reason: "MountRestored", Message: "S3 volume pv-2 replayed by the CSI plugin", ReportingController: "pvrescue-agent", ReportingInstance: "node-x"},
	}
	r := BuildStatus(context.Background(), s)
	if len(r.Nodes) != 1 || r.Nodes[0].Name != "node-x" || len(r.Nodes[0].Items) != 1 {
		t.Fatalf("nodes = %+v", r.Nodes)
	}
	if it := r.Nodes[0].Items[0]; it.Kind != RowMountReplay || it.PV != "pv-2" || it.Count != 1 {
		t.Errorf("row = %+v", it)
	}
}

// The restore method comes from the Event reason; only the old MountRestored reason is read by
// its message.
func TestMountRowKind(t *testing.T) {
	for _, tc := range []struct {
		reason, message, want string
	}{
		{"MountReplayed", "S3 volume pv-1 mounted again (bridge words in the text do not matter)", RowMountReplay},
		{"BridgeRetired", "S3 volume pv-1: the driver answers again, bridge stopped", RowMountReplay},
		{"MountBridged", "S3 volume pv-1 mounted again (replayed? no: the reason says bridged)", RowMountBridged},
		{"MountRestoreFailed", "CannotReproduce: S3 volume pv-1 ...", RowMountFailed},
		// Agents from before the per-method reasons.
		{"MountRestored", "S3 volume pv-2 replayed by the CSI plugin", RowMountReplay},
		{"MountRestored", "S3 volume pv-2 mounted again (s3fs bridge)", RowMountBridged},
		{"ContainersRemounted", "S3 volume pv-1 ...", ""},
		{"FakeDeviceCreated", "", ""},
	} {
		ev := &corev1.Event{Reason: tc.reason, Message: tc.message}
		if got := mountRowKind(ev); got != tc.want {
			t.Errorf("%s %q: row %q, want %q", tc.reason, tc.message, got, tc.want)
		}
	}
}

// A bridged then retired mount shows both rows, each by its reason.
func TestMountRowsByReason(t *testing.T) {
	s := snapshot()
	ref := corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "p"}
	s.Events = []corev1.Event{
		{InvolvedObject: ref, Reason: "MountBridged", Message: "S3 volume pv-1 mounted again (replay failed, driver down)", ReportingController: "pvrescue-agent", ReportingInstance: "node-x", Count: 2},
		{InvolvedObject: ref, Reason: "BridgeRetired", Message: "S3 volume pv-1 is the driver's own mount again", ReportingController: "pvrescue-agent", ReportingInstance: "node-x"},
	}
	r := BuildStatus(context.Background(), s)
	if len(r.Nodes) != 1 || len(r.Nodes[0].Items) != 2 {
		t.Fatalf("nodes = %+v", r.Nodes)
	}
	kinds := map[string]StatusRow{}
	for _, it := range r.Nodes[0].Items {
		kinds[it.Kind] = it
	}
	if b := kinds[RowMountBridged]; b.PV != "pv-1" || b.Count != 2 {
		t.Errorf("bridged row = %+v", b)
	}
	if rp := kinds[RowMountReplay]; rp.PV != "pv-1" || rp.Pod != "ns/p" {
		t.Errorf("replayed row = %+v", rp)
	}
}

func TestOptionsValidate(t *testing.T) {
	o := NewOptions(genericiooptions.NewTestIOStreamsDiscard())
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	o.Output = "xml"
	o.WebhookConfig = ""
	err := o.Validate()
	if !errors.Is(err, ErrBadOutput) || !strings.Contains(err.Error(), "--webhook-config") {
		t.Errorf("Validate = %v, want both problems", err)
	}
}

// The command line is parsed and validated before any client is built.
func TestCommandArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "deployment", "x"}, "usage: kubectl pvrescue explain pod NAME"},
		{[]string{"explain", "pod"}, "usage: kubectl pvrescue explain pod NAME"},
		{[]string{"status", "extra"}, "unknown command"},
		{[]string{"status", "-o", "xml"}, "unknown output format"},
	} {
		cmd := NewCommand(NewOptions(genericiooptions.NewTestIOStreamsDiscard()))
		cmd.SetArgs(tc.args)
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}
