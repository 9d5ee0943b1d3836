package app

import (
	"context"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/webhook"
)

// Kinds of status rows.
const (
	RowFakeDevice   = "fake-device"
	RowDiskMissing  = "disk-missing"
	RowMountBridged = "mount-bridged"
	RowMountReplay  = "mount-replayed"
	RowMountFailed  = "mount-restore-failed"
)

// StatusReport is `kubectl pvrescue status`.
type StatusReport struct {
	Nodes       []NodeStatus `json:"nodes"`
	Unprotected []PodRef     `json:"unprotectedPods"`
	Notes       []string     `json:"notes,omitempty"`
}

// NodeStatus is what pvrescue does on one node.
type NodeStatus struct {
	Name  string      `json:"name"`
	Items []StatusRow `json:"items"`
}

// StatusRow is one fake device, missing disk or restored mount.
type StatusRow struct {
	Kind string `json:"kind"`
	// PV is the volume; Pod (namespace/name) the pod, for mounts.
	PV  string `json:"pv,omitempty"`
	Pod string `json:"pod,omitempty"`
	// Path is the PV's disk path (spec.local.path); Device the fake standing in for it.
	Path   string `json:"path,omitempty"`
	Device string `json:"device,omitempty"`
	// Since is when it started (fake created, disk missing) or last happened (mount events).
	Since *time.Time `json:"since,omitempty"`
	// Count of mount events; Message of the latest.
	Count   int32  `json:"count,omitempty"`
	Message string `json:"message,omitempty"`
}

// PodRef is a pod in an opted-in namespace that uses pvrescue volumes but was not mutated.
type PodRef struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Node      string    `json:"node,omitempty"`
	Phase     string    `json:"phase"`
	Volumes   []string  `json:"volumes"` // name (kind)
	Created   time.Time `json:"created"`
}

var (
	missingPrefix = "local disks missing for PVs: "
	s3VolumeRe    = regexp.MustCompile(`S3 volume ([^\s:,()]+)`)
)

// mountRowKind says which status row an agent Event on a pod makes ("" for none). The restore
// method comes from the Event's reason; agents from before those reasons existed said only
// MountRestored, and named the method in the message ("replayed …" or a bridge), which is read
// only for them.
func mountRowKind(ev *corev1.Event) string {
	switch ev.Reason {
	case contract.ReasonMountReplayed, contract.ReasonBridgeRetired: // the driver's own mount is back at the target
		return RowMountReplay
	case contract.ReasonMountBridged:
		return RowMountBridged
	case contract.ReasonMountRestoreFailed:
		return RowMountFailed
	case contract.ReasonMountRestored: //nolint:staticcheck // the reason older agents sent
		if strings.Contains(strings.ToLower(ev.Message), "replay") {
			return RowMountReplay
		}
		return RowMountBridged
	}
	return ""
}

// BuildStatus derives the status report from a snapshot.
func BuildStatus(ctx context.Context, s *Snapshot) *StatusReport {
	r := &StatusReport{Notes: s.Notes}
	nodes := map[string]*NodeStatus{}
	node := func(name string) *NodeStatus {
		if name == "" {
			name = "<unknown>"
		}
		n, ok := nodes[name]
		if !ok {
			n = &NodeStatus{Name: name, Items: []StatusRow{}}
			nodes[name] = n
		}
		return n
	}
	for _, n := range s.Nodes {
		node(n.Name)
	}
	pvs := map[string]*corev1.PersistentVolume{}
	for i := range s.PVs {
		pvs[s.PVs[i].Name] = &s.PVs[i]
	}
	pods := map[string]*corev1.Pod{}
	for i := range s.Pods {
		pods[s.Pods[i].Namespace+"/"+s.Pods[i].Name] = &s.Pods[i]
	}

	// Fake devices: the agent's PV annotation; since: its latest FakeDeviceCreated Event.
	for _, pv := range s.PVs {
		dev, ok := pv.Annotations[contract.AnnotationFakeDevice]
		if !ok || dev == "" {
			continue
		}
		row := StatusRow{Kind: RowFakeDevice, PV: pv.Name, Path: localPath(&pv), Device: dev}
		if ev := latestEvent(s.Events, "PersistentVolume", "", pv.Name, contract.ReasonFakeDeviceCreated); ev != nil {
			row.Since = new(eventTime(ev))
		}
		node(pvNode(&pv)).Items = append(node(pvNode(&pv)).Items, row)
	}
	// Missing disks: the Node condition the agent keeps.
	for _, n := range s.Nodes {
		for _, c := range n.Status.Conditions {
			if c.Type != contract.ConditionLocalDiskMissing || c.Status != corev1.ConditionTrue {
				continue
			}
			list, ok := strings.CutPrefix(c.Message, missingPrefix)
			if !ok {
				continue
			}
			for _, name := range strings.Split(list, ",") {
				name = strings.TrimSpace(name)
				if name == "" {
					continue
				}
				row := StatusRow{Kind: RowDiskMissing, PV: name, Message: c.Message, Since: new(c.LastTransitionTime.Time)}
				if pv := pvs[name]; pv != nil {
					row.Path = localPath(pv)
				}
				node(n.Name).Items = append(node(n.Name).Items, row)
			}
		}
	}
	// Restored and failed mounts: the agent's Events on pods.
	for i := range s.Events {
		ev := &s.Events[i]
		if ev.InvolvedObject.Kind != "Pod" || !fromAgent(ev) {
			continue
		}
		kind := mountRowKind(ev)
		if kind == "" {
			continue
		}
		key := ev.InvolvedObject.Namespace + "/" + ev.InvolvedObject.Name
		row := StatusRow{Kind: kind, Pod: key, Count: max(ev.Count, 1), Message: ev.Message, Since: new(eventTime(ev))}
		if m := s3VolumeRe.FindStringSubmatch(ev.Message); m != nil {
			row.PV = m[1]
		}
		nodeName := ev.Source.Host
		if p := pods[key]; p != nil && p.Spec.NodeName != "" {
			nodeName = p.Spec.NodeName
		}
		if nodeName == "" {
			nodeName = ev.ReportingInstance
		}
		node(nodeName).Items = append(node(nodeName).Items, row)
	}
	for _, n := range nodes {
		sort.SliceStable(n.Items, func(i, j int) bool {
			a, b := n.Items[i], n.Items[j]
			if a.Kind != b.Kind {
				return a.Kind < b.Kind
			}
			return a.PV+a.Pod < b.PV+b.Pod
		})
		r.Nodes = append(r.Nodes, *n)
	}
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Name < r.Nodes[j].Name })
	r.Unprotected = unprotected(ctx, s)
	return r
}

// unprotected lists the pods the webhook should have mutated but did not.
func unprotected(ctx context.Context, s *Snapshot) []PodRef {
	optedIn := map[string]bool{}
	for _, ns := range s.Namespaces {
		optedIn[ns.Name] = s.NamespaceSelector.Matches(labels.Set(ns.Labels))
	}
	out := []PodRef{}
	for i := range s.Pods {
		p := &s.Pods[i]
		if !optedIn[p.Namespace] || !s.ObjectSelector.Matches(labels.Set(p.Labels)) {
			continue
		}
		if _, ok := p.Annotations[contract.AnnotationStatus]; ok {
			continue
		}
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		vols := rescuedVolumes(ctx, s, p)
		if len(vols) == 0 {
			continue
		}
		out = append(out, PodRef{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase),
			Volumes: vols, Created: p.CreationTimestamp.Time})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Namespace+"/"+out[i].Name < out[j].Namespace+"/"+out[j].Name })
	return out
}

// rescuedVolumes are the pod's volumes pvrescue acts on, as "name (kind)".
func rescuedVolumes(ctx context.Context, s *Snapshot, p *corev1.Pod) []string {
	cl := (&webhook.Classifier{Config: s.Config, Lookup: s.Lookup}).Classify(ctx, p.Namespace, p)
	var vols []string
	for name, vc := range cl.Volumes {
		if vc.Kind == webhook.KindLocalBlock || vc.Kind == webhook.KindS3 {
			vols = append(vols, name+" ("+string(vc.Kind)+")")
		}
	}
	sort.Strings(vols)
	return vols
}

func localPath(pv *corev1.PersistentVolume) string {
	if pv.Spec.Local != nil {
		return pv.Spec.Local.Path
	}
	return ""
}

// pvNode is the node a local PV is pinned to by its required node affinity.
func pvNode(pv *corev1.PersistentVolume) string {
	if pv.Spec.NodeAffinity == nil || pv.Spec.NodeAffinity.Required == nil {
		return ""
	}
	for _, term := range pv.Spec.NodeAffinity.Required.NodeSelectorTerms {
		for _, e := range term.MatchExpressions {
			if e.Key == corev1.LabelHostname && e.Operator == corev1.NodeSelectorOpIn && len(e.Values) == 1 {
				return e.Values[0]
			}
		}
	}
	return ""
}

// latestEvent returns the newest Event with reason about the object (namespace "" matches any).
func latestEvent(evs []corev1.Event, kind, namespace, name, reason string) *corev1.Event {
	var best *corev1.Event
	for i := range evs {
		ev := &evs[i]
		o := ev.InvolvedObject
		if o.Kind != kind || o.Name != name || ev.Reason != reason || (namespace != "" && o.Namespace != namespace) {
			continue
		}
		if best == nil || eventTime(ev).After(eventTime(best)) {
			best = ev
		}
	}
	return best
}

// eventTime is when an Event last happened, whichever API wrote it.
func eventTime(ev *corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.CreationTimestamp.Time
}

// fromAgent reports whether the agent wrote the Event (core/v1 or events.k8s.io recorders).
func fromAgent(ev *corev1.Event) bool {
	return ev.Source.Component == contract.AgentComponent || ev.ReportingController == contract.AgentComponent
}
