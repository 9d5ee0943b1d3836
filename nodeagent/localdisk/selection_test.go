package localdisk_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/nodeagent/localdisk"
)

func req(key string, op corev1.NodeSelectorOperator, vals ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: vals}
}

func TestNodeSelectorMatches(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{
		"kubernetes.io/hostname": "n1", "zone": "a", "disks": "4"}}}
	terms := func(ts ...corev1.NodeSelectorTerm) *corev1.NodeSelector {
		return &corev1.NodeSelector{NodeSelectorTerms: ts}
	}
	expr := func(rs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: rs}
	}
	for _, tc := range []struct {
		name string
		sel  *corev1.NodeSelector
		want bool
	}{
		{"nil", nil, false},
		{"no terms", terms(), false},
		{"empty term", terms(corev1.NodeSelectorTerm{}), false},
		{"hostname in", terms(expr(req("kubernetes.io/hostname", corev1.NodeSelectorOpIn, "n1"))), true},
		{"hostname other", terms(expr(req("kubernetes.io/hostname", corev1.NodeSelectorOpIn, "n2"))), false},
		{"or of terms", terms(expr(req("kubernetes.io/hostname", corev1.NodeSelectorOpIn, "n2")), expr(req("zone", corev1.NodeSelectorOpIn, "a"))), true},
		{"and in term", terms(expr(req("zone", corev1.NodeSelectorOpIn, "a"), req("zone", corev1.NodeSelectorOpNotIn, "a"))), false},
		{"notin absent", terms(expr(req("gpu", corev1.NodeSelectorOpNotIn, "x"))), true},
		{"exists", terms(expr(req("zone", corev1.NodeSelectorOpExists))), true},
		{"doesnotexist", terms(expr(req("zone", corev1.NodeSelectorOpDoesNotExist))), false},
		{"gt", terms(expr(req("disks", corev1.NodeSelectorOpGt, "3"))), true},
		{"lt", terms(expr(req("disks", corev1.NodeSelectorOpLt, "3"))), false},
		{"gt not a number", terms(expr(req("zone", corev1.NodeSelectorOpGt, "3"))), false},
		{"field name", terms(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", corev1.NodeSelectorOpIn, "n1")}}), true},
		{"field other name", terms(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{req("metadata.name", corev1.NodeSelectorOpIn, "n2")}}), false},
		{"field unsupported", terms(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{req("spec.x", corev1.NodeSelectorOpIn, "n1")}}), false},
		{"unknown op", terms(expr(req("zone", "Near", "a"))), false},
	} {
		if got := localdisk.NodeSelectorMatches(tc.sel, node); got != tc.want {
			t.Errorf("%s: got %v want %v", tc.name, got, tc.want)
		}
	}
}

func localPV(name, path, node string, phase corev1.PersistentVolumePhase, mode corev1.PersistentVolumeMode) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName:       "local-ssd",
			VolumeMode:             &mode,
			PersistentVolumeSource: corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{req("kubernetes.io/hostname", corev1.NodeSelectorOpIn, node)}}}}},
		},
		Status: corev1.PersistentVolumeStatus{Phase: phase},
	}
}

func TestSelectVolume(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}}}
	block, fsm := corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem
	noMode := localPV("p", "/dev/x", "n1", corev1.VolumeBound, block)
	noMode.Spec.VolumeMode = nil
	notLocal := localPV("p", "/dev/x", "n1", corev1.VolumeBound, block)
	notLocal.Spec.Local = nil
	notLocal.Spec.HostPath = &corev1.HostPathVolumeSource{Path: "/dev/x"}
	noAff := localPV("p", "/dev/x", "n1", corev1.VolumeBound, block)
	noAff.Spec.NodeAffinity = nil
	otherClass := localPV("p", "/dev/x", "n1", corev1.VolumeBound, block)
	otherClass.Spec.StorageClassName = "standard"
	for _, tc := range []struct {
		name string
		pv   *corev1.PersistentVolume
		want bool
	}{
		{"bound block local here", localPV("p", "/dev/x", "n1", corev1.VolumeBound, block), true},
		{"released", localPV("p", "/dev/x", "n1", corev1.VolumeReleased, block), false},
		{"available", localPV("p", "/dev/x", "n1", corev1.VolumeAvailable, block), false},
		{"filesystem", localPV("p", "/dev/x", "n1", corev1.VolumeBound, fsm), false},
		{"default mode (filesystem)", noMode, false},
		{"other node", localPV("p", "/dev/x", "n2", corev1.VolumeBound, block), false},
		{"not local", notLocal, false},
		{"no affinity", noAff, false},
		{"other class", otherClass, false},
	} {
		v, ok := localdisk.SelectVolume(tc.pv, node, []string{"local-ssd"})
		if ok != tc.want || (ok && (v.PV != "p" || v.Path != "/dev/x")) {
			t.Errorf("%s: got %+v %v, want %v", tc.name, v, ok, tc.want)
		}
	}
	if _, ok := localdisk.SelectVolume(otherClass, node, nil); ok {
		t.Errorf("an empty class list must select nothing (config rejects it)")
	}
}
