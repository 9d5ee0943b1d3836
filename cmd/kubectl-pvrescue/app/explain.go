package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/webhook"
)

// ErrPodNotFound is returned by Explain when the snapshot has no such pod.
var ErrPodNotFound = errors.New("pod not found")

// Explanation is `kubectl pvrescue explain pod NAME`.
type Explanation struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Node      string `json:"node,omitempty"`
	// Mutated is true when the pod carries the webhook's status annotation.
	Mutated bool `json:"mutated"`
	// Webhook is the decoded annotation (nil when not mutated).
	Webhook *webhook.Injection `json:"webhook,omitempty"`
	// Reason explains a missing annotation, or an annotation that does not decode.
	Reason  string          `json:"reason,omitempty"`
	Volumes []VolumeExplain `json:"volumes"`
	Events  []EventRow      `json:"events"`
}

// VolumeExplain is one pod volume as pvrescue sees it.
type VolumeExplain struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"`
	Claim string `json:"claim,omitempty"`
	PV    string `json:"pv,omitempty"`
	// FakeDevice is set while a fake stands in for the PV's disk.
	FakeDevice string `json:"fakeDevice,omitempty"`
	Source     string `json:"source,omitempty"`
}

// EventRow is one Event about the pod or one of its PVs.
type EventRow struct {
	Time    time.Time `json:"time"`
	Object  string    `json:"object"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
}

// Explain says what pvrescue did to one pod and for its volumes.
func Explain(ctx context.Context, s *Snapshot, namespace, name string) (*Explanation, error) {
	var pod *corev1.Pod
	for i := range s.Pods {
		if s.Pods[i].Namespace == namespace && s.Pods[i].Name == name {
			pod = &s.Pods[i]
		}
	}
	if pod == nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrPodNotFound, namespace, name)
	}
	e := &Explanation{Namespace: namespace, Name: name, Node: pod.Spec.NodeName, Volumes: []VolumeExplain{}, Events: []EventRow{}}
	cl := (&webhook.Classifier{Config: s.Config, Lookup: s.Lookup}).Classify(ctx, namespace, pod)

	if raw, ok := pod.Annotations[contract.AnnotationStatus]; ok {
		e.Mutated = true
		var st webhook.Injection
		if err := json.Unmarshal([]byte(raw), &st); err != nil {
			e.Reason = fmt.Sprintf("annotation %s does not decode: %v", contract.AnnotationStatus, err)
		} else {
			e.Webhook = &st
		}
	} else {
		e.Reason = notMutatedReason(s, pod, cl)
	}

	pvOfClaim, fakeDevice := map[string]string{}, map[string]string{}
	for _, pv := range s.PVs {
		if ref := pv.Spec.ClaimRef; ref != nil && ref.Namespace == namespace {
			pvOfClaim[ref.Name] = pv.Name
		}
		fakeDevice[pv.Name] = pv.Annotations[contract.AnnotationFakeDevice]
	}
	pvs := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		vc, ok := cl.Volumes[v.Name]
		if !ok {
			continue
		}
		ve := VolumeExplain{Name: v.Name, Kind: string(vc.Kind), Claim: vc.Claim, Source: vc.Source}
		if vc.Claim != "" {
			ve.PV = pvOfClaim[vc.Claim]
		}
		if ve.PV != "" {
			pvs[ve.PV] = true
			ve.FakeDevice = fakeDevice[ve.PV]
		}
		e.Volumes = append(e.Volumes, ve)
	}
	for _, sk := range cl.Skipped {
		e.Volumes = append(e.Volumes, VolumeExplain{Name: sk.Volume, Kind: "unclassified", Source: sk.Reason})
	}
	for i := range s.Events {
		ev := &s.Events[i]
		o := ev.InvolvedObject
		if !fromAgent(ev) {
			continue
		}
		switch {
		case o.Kind == "Pod" && o.Namespace == namespace && o.Name == name:
		case o.Kind == "PersistentVolume" && pvs[o.Name]:
		default:
			continue
		}
		e.Events = append(e.Events, EventRow{Time: eventTime(ev), Object: strings.ToLower(o.Kind) + "/" + o.Name, Type: ev.Type,
			Reason: ev.Reason, Message: ev.Message, Count: ev.Count})
	}
	sort.SliceStable(e.Events, func(i, j int) bool { return e.Events[i].Time.Before(e.Events[j].Time) })
	return e, nil
}

func notMutatedReason(s *Snapshot, pod *corev1.Pod, cl webhook.Classification) string {
	var nsLabels map[string]string
	for _, ns := range s.Namespaces {
		if ns.Name == pod.Namespace {
			nsLabels = ns.Labels
		}
	}
	switch {
	case !s.NamespaceSelector.Matches(labels.Set(nsLabels)):
		return fmt.Sprintf("namespace %s is not opted in (label it %s=%s)", pod.Namespace, contract.LabelInject, contract.LabelInjectEnabled)
	case !s.ObjectSelector.Matches(labels.Set(pod.Labels)):
		return fmt.Sprintf("the pod opted out (label %s=%s)", contract.LabelInject, contract.LabelInjectOptOutVal)
	}
	for _, vc := range cl.Volumes {
		if vc.Kind == webhook.KindLocalBlock || vc.Kind == webhook.KindS3 {
			return "the pod uses pvrescue volumes but was admitted without the webhook (unreachable, timed out, or " +
				"created before pvrescue was installed): it is not protected; recreate it"
		}
	}
	return "no local block or S3 volume: nothing to inject"
}
