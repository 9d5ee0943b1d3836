package webhook

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	jsonpatch "gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/pvrescue/pvrescue/hack/bench/workload"
)

// patchOpJSON is one operation as jsonpatch's Operation.MarshalJSON writes it.
type patchOpJSON struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// marshalPatchReference is marshalPatch as it was before patchjson.go: json.Marshal of the
// operations in one encoder pass. Its bytes are the ones marshalPatch must give.
func marshalPatchReference(ops []jsonpatch.JsonPatchOperation) ([]byte, error) {
	out := make([]patchOpJSON, len(ops))
	for i, op := range ops {
		out[i] = patchOpJSON{Op: op.Operation, Path: op.Path, Value: op.Value}
		if op.Value == nil && (op.Operation == "add" || op.Operation == "replace") {
			out[i].Value = json.RawMessage("null")
		}
	}
	return json.Marshal(out)
}

// marshalPatch encodes ops as the webhook does, into a fresh buffer.
func marshalPatch(ops []jsonpatch.JsonPatchOperation) ([]byte, error) {
	b, err := appendPatch(nil, ops)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// samePatch fails when marshalPatch and the reference disagree on ops (in bytes or in failing).
func samePatch(t testing.TB, ops []jsonpatch.JsonPatchOperation) {
	t.Helper()
	want, werr := marshalPatchReference(ops)
	got, gerr := marshalPatch(ops)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("marshalPatch error %v, encoding/json error %v", gerr, werr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("marshalPatch differs from encoding/json:\n got %s\nwant %s", got, want)
	}
}

// handEncoded lists, for every struct patchjson.go and reviewjson.go write field by field, the
// fields they know (write by hand or hand to json.Marshal). A field k8s.io/api adds is not
// written until it is added there and here.
var handEncoded = map[reflect.Type][]string{
	reflect.TypeFor[corev1.Container](): {"Name", "Image", "Command", "Args", "WorkingDir", "Ports", "EnvFrom", "Env",
		"Resources", "ResizePolicy", "RestartPolicy", "RestartPolicyRules", "VolumeMounts", "VolumeDevices",
		"LivenessProbe", "ReadinessProbe", "StartupProbe", "Lifecycle", "TerminationMessagePath",
		"TerminationMessagePolicy", "ImagePullPolicy", "SecurityContext", "Stdin", "StdinOnce", "TTY"},
	reflect.TypeFor[corev1.Probe](): {"ProbeHandler", "InitialDelaySeconds", "TimeoutSeconds", "PeriodSeconds",
		"SuccessThreshold", "FailureThreshold", "TerminationGracePeriodSeconds"},
	reflect.TypeFor[corev1.ProbeHandler](): {"Exec", "HTTPGet", "TCPSocket", "GRPC"},
	reflect.TypeFor[corev1.ExecAction]():   {"Command"},
	reflect.TypeFor[corev1.VolumeMount](): {"Name", "ReadOnly", "RecursiveReadOnly", "MountPath", "SubPath",
		"MountPropagation", "SubPathExpr", "BindMountOptions"},
	reflect.TypeFor[corev1.Volume]():               {"Name", "VolumeSource"},
	reflect.TypeFor[corev1.EmptyDirVolumeSource](): {"Medium", "SizeLimit", "Mode"},
	reflect.TypeFor[corev1.EnvVar]():               {"Name", "Value", "ValueFrom"},
	reflect.TypeFor[corev1.VolumeDevice]():         {"Name", "DevicePath"},
	reflect.TypeFor[corev1.ResourceRequirements](): {"Limits", "Requests", "Claims"},
	reflect.TypeFor[corev1.SecurityContext](): {"Capabilities", "Privileged", "SELinuxOptions", "WindowsOptions",
		"RunAsUser", "RunAsGroup", "RunAsNonRoot", "ReadOnlyRootFilesystem", "AllowPrivilegeEscalation",
		"ProcMount", "SeccompProfile", "AppArmorProfile"},
	reflect.TypeFor[corev1.Capabilities]():         {"Add", "Drop"},
	reflect.TypeFor[corev1.SeccompProfile]():       {"Type", "LocalhostProfile"},
	reflect.TypeFor[admissionv1.AdmissionReview](): {"TypeMeta", "Request", "Response"},
	reflect.TypeFor[admissionv1.AdmissionResponse](): {"UID", "Allowed", "Result", "Patch", "PatchType",
		"AuditAnnotations", "Warnings"},
	reflect.TypeFor[metav1.TypeMeta](): {"Kind", "APIVersion"},
	reflect.TypeFor[metav1.Status]():   {"TypeMeta", "ListMeta", "Status", "Message", "Reason", "Details", "Code"},
}

// TestPatchJSONKnowsEveryField fails when a struct written by hand gains or loses a field (a
// k8s.io/api upgrade): its JSON would silently lack the new field.
func TestPatchJSONKnowsEveryField(t *testing.T) {
	for ty, known := range handEncoded {
		var have []string
		for f := range ty.Fields() {
			if f.IsExported() {
				have = append(have, f.Name)
			}
		}
		if !slices.Equal(have, known) {
			t.Errorf("%s has fields %q; patchjson.go/reviewjson.go write %q: write the new fields there (in struct order, with their omitempty) and list them in handEncoded", ty, have, known)
		}
	}
	// The volume is written by hand only when its source is an emptyDir; any other source is
	// seen by comparing the source with the zero value, which needs every source to be a pointer.
	for f := range reflect.TypeFor[corev1.VolumeSource]().Fields() {
		if f.Type.Kind() != reflect.Pointer {
			t.Errorf("VolumeSource.%s is a %s, not a pointer: the emptyDir check in jsonBuf.volume misses it", f.Name, f.Type)
		}
	}
}

// fill sets every exported field reachable from v to a non-zero value (maps get two keys, so
// their order shows, strings carry characters encoding/json escapes).
func fill(v reflect.Value, tag string, depth int) {
	switch v.Type() {
	case reflect.TypeFor[resource.Quantity]():
		v.Set(reflect.ValueOf(resource.MustParse("1500m")))
		return
	case reflect.TypeFor[intstr.IntOrString]():
		v.Set(reflect.ValueOf(intstr.FromString("port<" + tag)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(tag + " <&>\u2028\x01")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Pointer:
		if depth > 8 {
			return
		}
		n := reflect.New(v.Type().Elem())
		fill(n.Elem(), tag, depth+1)
		v.Set(n)
	case reflect.Slice:
		if depth > 8 {
			return
		}
		n := reflect.MakeSlice(v.Type(), 2, 2)
		fill(n.Index(0), tag+"0", depth+1)
		fill(n.Index(1), tag+"1", depth+1)
		v.Set(n)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		for _, k := range []string{"b", "a"} {
			key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(key, k+tag, depth+1)
			fill(val, tag, depth+1)
			m.SetMapIndex(key, val)
		}
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Type().Field(i); f.IsExported() {
				fill(v.Field(i), tag+"."+f.Name, depth+1)
			}
		}
	}
}

// filled returns a T with every field set, and for each exported field a T with that field alone
// set (the rest zero: omitempty at work).
func filled[T any]() map[string]T {
	out := map[string]T{}
	var all T
	fill(reflect.ValueOf(&all).Elem(), "all", 0)
	out["all fields"] = all
	ty := reflect.TypeFor[T]()
	for i := range ty.NumField() {
		if f := ty.Field(i); f.IsExported() {
			var one T
			fill(reflect.ValueOf(&one).Elem().Field(i), f.Name, 1)
			out[f.Name+" alone"] = one
		}
	}
	return out
}

// Every struct written by hand, filled field by field and whole, inside the values Inject
// patches with, gives encoding/json's bytes: a field written wrongly, out of order or not at all
// shows here.
func TestPatchJSONFilledStructs(t *testing.T) {
	type named struct {
		name string
		v    any
	}
	var values []named
	add := func(name string, vs ...any) {
		for _, v := range vs {
			values = append(values, named{fmt.Sprintf("%T %s", v, name), v})
		}
	}
	for name, c := range filled[corev1.Container]() {
		add(name, c, []corev1.Container{c, {Name: "second"}})
	}
	for name, p := range filled[corev1.Probe]() {
		add(name, &p, corev1.Container{Name: "c", ReadinessProbe: &p, StartupProbe: &p})
	}
	for name, h := range filled[corev1.ProbeHandler]() {
		add(name, &corev1.Probe{ProbeHandler: h})
	}
	for name, x := range filled[corev1.ExecAction]() {
		add(name, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &x}})
	}
	for name, m := range filled[corev1.VolumeMount]() {
		add(name, m, corev1.Container{VolumeMounts: []corev1.VolumeMount{m, m}})
	}
	for name, v := range filled[corev1.Volume]() {
		add(name, v, []any{v})
	}
	for name, d := range filled[corev1.EmptyDirVolumeSource]() {
		add(name, corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &d}})
	}
	for name, e := range filled[corev1.EnvVar]() {
		add(name, corev1.Container{Env: []corev1.EnvVar{e, e}})
	}
	for name, d := range filled[corev1.VolumeDevice]() {
		add(name, corev1.Container{VolumeDevices: []corev1.VolumeDevice{d, d}})
	}
	for name, r := range filled[corev1.ResourceRequirements]() {
		add(name, corev1.Container{Resources: r})
	}
	for name, sc := range filled[corev1.SecurityContext]() {
		add(name, corev1.Container{SecurityContext: &sc})
	}
	for name, c := range filled[corev1.Capabilities]() {
		add(name, corev1.Container{SecurityContext: &corev1.SecurityContext{Capabilities: &c}})
	}
	for name, p := range filled[corev1.SeccompProfile]() {
		add(name, corev1.Container{SecurityContext: &corev1.SecurityContext{SeccompProfile: &p}})
	}
	if len(values) < 100 {
		t.Fatalf("only %d values built", len(values))
	}
	for _, v := range values {
		t.Run(v.name, func(t *testing.T) {
			samePatch(t, []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/x", Value: v.v}})
		})
	}
}

// The operations Inject and the handler produce for every golden case and for the pods the load
// run of make bench sends.
func injectedOps(t testing.TB) []jsonpatch.JsonPatchOperation {
	t.Helper()
	var ops []jsonpatch.JsonPatchOperation
	files, _ := filepath.Glob("testdata/golden/*.yaml")
	for _, file := range files {
		pod, objs := loadCase(t, file)
		in := newDefaulter(objs...).Default(t.Context(), "apps", pod)
		ops = append(ops, in.Patch...)
	}
	objs, err := workload.Objects(testConfig())
	if err != nil {
		t.Fatal(err)
	}
	d := newDefaulter(objs...)
	for _, pod := range []*corev1.Pod{workload.FourPVCPod(), workload.ManagedFieldsPod(64 << 10), workload.HundredVolumePod()} {
		in := d.Default(t.Context(), workload.Namespace, pod)
		if len(in.Patch) == 0 {
			t.Fatalf("the bench pod %s is not patched", pod.Name)
		}
		ops = append(ops, in.Patch...)
	}
	return ops
}

func TestMarshalPatchInjectedOps(t *testing.T) {
	ops := injectedOps(t)
	if len(ops) < 60 {
		t.Fatalf("only %d operations compared: the golden cases patched nothing?", len(ops))
	}
	for i := range ops {
		samePatch(t, ops[i:i+1])
	}
	samePatch(t, ops)
	// The handler's form for a pod without metadata.
	for _, op := range ops {
		if op.Path == "/metadata/annotations" {
			samePatch(t, []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/metadata", Value: map[string]any{"annotations": op.Value}}})
		}
	}
}

// hostile are strings encoding/json escapes in every way it has.
var hostile = []string{
	"", "plain", "no-break\u00a0space", `quote " and \ backslash`, "<script>&amp;</script>", "line\u2028sep\u2029para",
	"invalid \xff utf-8", "truncated \xe2\x80", "lone \xc3", "\x00\x01\x07\x08\x09\x0a\x0b\x0c\x0d\x1b\x1f\x7f",
	"emoji 🙂 and ü", "\ufffd already", "surrogate \xed\xa0\x80", "pvrescue.io~1status", "/spec/containers/-",
}

func TestMarshalPatchHostileValues(t *testing.T) {
	quantities := map[string]resource.Quantity{}
	for _, s := range []string{"100m", "1Gi", "0", "1.5", "1000m", "1.50", "0.5Gi", "1e3", "1k", "1024Ki", "-1", "12345678901234567890", "0.0001"} {
		quantities[s] = resource.MustParse(s)
	}
	quantities["milli"] = *resource.NewMilliQuantity(1500, resource.DecimalSI)
	quantities["binary"] = *resource.NewQuantity(3<<30, resource.BinarySI)
	quantities["zero value"] = resource.Quantity{}

	var values []any
	for _, h := range hostile {
		values = append(values, h, []string{h, h}, map[string]string{h: h, "a" + h: ""}, map[string]any{"annotations": map[string]string{h: h}},
			[]any{h}, corev1.MountPropagationMode(h),
			corev1.VolumeMount{Name: h, MountPath: h, SubPath: h, MountPropagation: ptr.To(corev1.MountPropagationMode(h))},
			corev1.Volume{Name: h, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMedium(h)}}},
			&corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{h}}}},
			corev1.Container{Name: h, Image: h, Command: []string{h}, Args: []string{h, h}, Env: []corev1.EnvVar{{Name: h, Value: h}},
				VolumeMounts: []corev1.VolumeMount{{Name: h, MountPath: h}}, VolumeDevices: []corev1.VolumeDevice{{Name: h, DevicePath: h}},
				Resources:              corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceName(h): resource.MustParse("1")}},
				TerminationMessagePath: h, TerminationMessagePolicy: corev1.TerminationMessagePolicy(h), ImagePullPolicy: corev1.PullPolicy(h),
				SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{corev1.Capability(h)}},
					SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileType(h), LocalhostProfile: &h}}})
	}
	for name, q := range quantities {
		rl := corev1.ResourceList{corev1.ResourceName(name): q, "cpu": q, "memory": q, "a": q}
		values = append(values, corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: rl, Requests: rl}},
			corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &q}}})
	}
	// Empty against nil, set against unset.
	values = append(values,
		[]string(nil), []string{}, map[string]string(nil), map[string]string{}, map[string]any(nil), map[string]any{}, []any(nil), []any{},
		[]corev1.Container(nil), []corev1.Container{}, (*corev1.Probe)(nil), &corev1.Probe{}, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{}}},
		&corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{}}}},
		corev1.Container{}, corev1.Container{Command: []string{}, Args: []string{}, Env: []corev1.EnvVar{}, VolumeMounts: []corev1.VolumeMount{},
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{}, Requests: corev1.ResourceList{}}},
		corev1.Container{SecurityContext: &corev1.SecurityContext{}}, corev1.Container{SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{}}}},
		corev1.Volume{}, corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
		corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}},
		corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}, ConfigMap: &corev1.ConfigMapVolumeSource{}}},
		corev1.VolumeMount{}, corev1.MountPropagationMode(""),
		// Types written by encoding/json, alone and inside values written by hand.
		1, 2.5, true, false, json.RawMessage(`{"a" : 1}`), []any{1, nil, "x", map[string]any{"k": []int{1}}},
		map[string]any{"a": nil, "b": 2, "c": corev1.Container{Name: "x"}}, []corev1.VolumeMount{{Name: "m"}}, &corev1.Container{Name: "p"},
		corev1.Probe{}, struct{ A string }{"<"},
	)
	// Every SecurityContext pointer set and unset, one at a time.
	scType := reflect.TypeFor[corev1.SecurityContext]()
	for i := range scType.NumField() {
		var sc corev1.SecurityContext
		fill(reflect.ValueOf(&sc).Elem(), "sc", 0)
		reflect.ValueOf(&sc).Elem().Field(i).SetZero()
		values = append(values, corev1.Container{Name: "unset " + scType.Field(i).Name, SecurityContext: &sc})
		for _, b := range []bool{true, false} {
			var one corev1.SecurityContext
			f := reflect.ValueOf(&one).Elem().Field(i)
			fill(f, "sc", 1)
			if f.Elem().Kind() == reflect.Bool {
				f.Elem().SetBool(b)
			}
			values = append(values, corev1.Container{Name: "set " + scType.Field(i).Name, SecurityContext: &one})
		}
	}
	var ops []jsonpatch.JsonPatchOperation
	for i, v := range values {
		for _, op := range []string{"add", "replace", "remove", "test"} {
			one := []jsonpatch.JsonPatchOperation{{Operation: op, Path: hostile[i%len(hostile)], Value: v}}
			samePatch(t, one)
			ops = append(ops, one...)
		}
	}
	for _, h := range hostile {
		for _, op := range []string{"add", "replace", "remove", "test", h} {
			ops = append(ops, jsonpatch.JsonPatchOperation{Operation: op, Path: h})
		}
	}
	samePatch(t, ops)
	samePatch(t, nil)
	samePatch(t, []jsonpatch.JsonPatchOperation{})
	// What encoding/json cannot write fails here too.
	if _, err := marshalPatch([]jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/x", Value: []any{make(chan int)}}}); err == nil {
		t.Error("a channel was marshalled")
	}
}

func TestAppendJSONStringEveryByte(t *testing.T) {
	for b := range 256 {
		for _, s := range []string{string(rune(b)), string([]byte{byte(b)}), "a" + string([]byte{byte(b)}) + "z"} {
			want, _ := json.Marshal(s)
			if got := appendJSONString(nil, s); !bytes.Equal(got, want) {
				t.Errorf("%q: got %s, want %s", s, got, want)
			}
		}
	}
}

// FuzzMarshalPatch builds the operations Inject builds from fuzzed strings and compares their
// bytes with encoding/json's.
func FuzzMarshalPatch(f *testing.F) {
	for i, h := range hostile {
		f.Add(h, hostile[(i+1)%len(hostile)], "100m", int32(i))
	}
	f.Add("guard", "/spec/initContainers/0", "1.5Gi", int32(-1))
	f.Fuzz(func(t *testing.T, a, b, c string, n int32) {
		q, err := resource.ParseQuantity(c)
		if err != nil {
			q = *resource.NewMilliQuantity(int64(n), resource.DecimalSI)
		}
		c64 := int64(n)
		container := corev1.Container{
			Name: a, Image: b, ImagePullPolicy: corev1.PullPolicy(c), Command: []string{a, b}, Args: []string{c, a},
			Env:           []corev1.EnvVar{{Name: a, Value: b}},
			VolumeMounts:  []corev1.VolumeMount{{Name: b, MountPath: c, ReadOnly: n%2 == 0}},
			VolumeDevices: []corev1.VolumeDevice{{Name: c, DevicePath: a}},
			Resources: corev1.ResourceRequirements{
				Limits:   corev1.ResourceList{corev1.ResourceName(a): q, corev1.ResourceName(b): q, "memory": q},
				Requests: corev1.ResourceList{corev1.ResourceName(c): q}},
			SecurityContext: &corev1.SecurityContext{RunAsUser: &c64, RunAsNonRoot: ptr.To(n > 0),
				Capabilities:   &corev1.Capabilities{Drop: []corev1.Capability{corev1.Capability(a)}},
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileType(b), LocalhostProfile: &c}},
			TerminationMessagePath: b, TerminationMessagePolicy: corev1.TerminationMessagePolicy(a),
		}
		if n%3 == 0 {
			container.WorkingDir, container.Ports = a, []corev1.ContainerPort{{Name: b, ContainerPort: n}}
		}
		pr := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{a, b, c}}},
			InitialDelaySeconds: n, PeriodSeconds: n / 2, SuccessThreshold: 1}
		mode := corev1.MountPropagationMode(c)
		ops := []jsonpatch.JsonPatchOperation{
			{Operation: "add", Path: a, Value: b},
			{Operation: "replace", Path: b + "/command", Value: []string{a, b, c}},
			{Operation: "add", Path: "/metadata/annotations", Value: map[string]string{a: b, c: a}},
			{Operation: "add", Path: "/metadata", Value: map[string]any{"annotations": map[string]string{b: c}}},
			{Operation: "add", Path: c, Value: []any{corev1.VolumeMount{Name: a, MountPath: b, MountPropagation: &mode}}},
			{Operation: "add", Path: "/x", Value: mode},
			{Operation: "add", Path: "/spec/volumes/-", Value: corev1.Volume{Name: a, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMedium(b), SizeLimit: &q}}}},
			{Operation: "add", Path: "/livenessProbe", Value: pr},
			{Operation: "add", Path: "/spec/initContainers", Value: []corev1.Container{container, {Name: c}}},
			{Operation: "replace", Path: "/spec/initContainers/0", Value: container},
			{Operation: a, Path: c},
			{Operation: "remove", Path: b},
			{Operation: "add", Path: a, Value: nil},
		}
		samePatch(t, ops)
	})
}

// BenchmarkMarshalPatch: the 4-PVC pod's patch, written by patchjson.go and by encoding/json.
func BenchmarkMarshalPatch(b *testing.B) {
	objs, err := workload.Objects(testConfig())
	if err != nil {
		b.Fatal(err)
	}
	ops := newDefaulter(objs...).Default(b.Context(), workload.Namespace, workload.FourPVCPod()).Patch
	for _, m := range []struct {
		name string
		fn   func([]jsonpatch.JsonPatchOperation) ([]byte, error)
	}{{"patchjson", marshalPatch}, {"encoding-json", marshalPatchReference}} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := m.fn(ops); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
