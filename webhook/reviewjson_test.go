package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"

	jsonpatch "gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/pvrescue/pvrescue/hack/bench/workload"
)

// writeReviewReference is writeReview as it was before reviewjson.go (the framework's own code).
func writeReviewReference(w io.Writer, ar admissionv1.AdmissionReview) {
	log := logf.Log.WithName("admission")
	if err := json.NewEncoder(w).Encode(ar); err != nil {
		log.Error(err, "unable to encode and write the response")
		serverError := admission.Errored(http.StatusInternalServerError, err)
		if err = json.NewEncoder(w).Encode(admissionv1.AdmissionReview{Response: &serverError.AdmissionResponse}); err != nil {
			log.Error(err, "still unable to encode and write the InternalServerError response")
		}
		return
	}
	if log := log.V(5); log.Enabled() {
		res := ar.Response
		if res.Result != nil {
			log = log.WithValues("code", res.Result.Code, "reason", res.Result.Reason, "message", res.Result.Message)
		}
		log.Info("wrote response", "requestID", res.UID, "allowed", res.Allowed)
	}
}

// sameReview fails when appendReview and json.NewEncoder disagree on ar.
func sameReview(t testing.TB, ar admissionv1.AdmissionReview) {
	t.Helper()
	var want bytes.Buffer
	werr := json.NewEncoder(&want).Encode(ar)
	got, gerr := appendReview(nil, &ar)
	if (werr != nil) != (gerr != nil) {
		t.Fatalf("appendReview error %v, encoding/json error %v", gerr, werr)
	}
	if werr == nil && !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("appendReview differs from json.NewEncoder:\n got %s\nwant %s", got, want.Bytes())
	}
	var ref, ours bytes.Buffer
	writeReviewReference(&ref, ar)
	writeReview(&ours, ar)
	if !bytes.Equal(ours.Bytes(), ref.Bytes()) {
		t.Fatalf("writeReview differs from the framework's:\n got %s\nwant %s", ours.Bytes(), ref.Bytes())
	}
}

func reviewOf(r admission.Response, uid string, gvk bool) admissionv1.AdmissionReview {
	r.UID = types.UID(uid)
	ar := admissionv1.AdmissionReview{Response: &r.AdmissionResponse}
	if gvk {
		ar.SetGroupVersionKind(reviewV1)
	}
	return ar
}

func TestAppendReviewMatchesEncoder(t *testing.T) {
	ops := []jsonpatch.JsonPatchOperation{{Operation: "add", Path: "/metadata/annotations", Value: map[string]string{"k": "<v>"}}}
	patched := admission.Patched("", ops...)
	raw, err := marshalPatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	patched.Patch, patched.PatchType, patched.Patches = raw, ptr.To(admissionv1.PatchTypeJSONPatch), nil
	var responses []admission.Response
	for _, h := range hostile {
		responses = append(responses,
			admission.Allowed(h), admission.Denied(h),
			admission.Errored(http.StatusBadRequest, errors.New(h)), admission.Errored(http.StatusInternalServerError, errors.New(h)),
			patched.WithWarnings(h, h+"2"), admission.Allowed("").WithWarnings(h))
	}
	full := patched.WithWarnings("w")
	full.AuditAnnotations = map[string]string{"b": "<", "a": "\u2028"}
	full.Result = &metav1.Status{
		TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: "7", Continue: "c", RemainingItemCount: ptr.To[int64](-3),
			ShardInfo: &metav1.ShardInfo{Selector: "x<"}},
		Status: metav1.StatusFailure, Message: "m", Reason: metav1.StatusReasonConflict,
		Details: &metav1.StatusDetails{Name: "n", Causes: []metav1.StatusCause{{Message: "<"}}, RetryAfterSeconds: 1}, Code: 409,
	}
	empty := admission.Allowed("")
	empty.Result, empty.Patch, empty.PatchType, empty.Warnings = nil, []byte{}, nil, []string{}
	responses = append(responses, patched, full, empty, admission.Response{},
		admission.Patched("").WithWarnings(), admission.ValidationResponse(true, "ok"))
	n := 0
	for i, r := range responses {
		for _, gvk := range []bool{true, false} {
			sameReview(t, reviewOf(r, hostile[i%len(hostile)], gvk))
			n++
		}
	}
	if n < 80 {
		t.Fatalf("only %d reviews compared", n)
	}
	sameReview(t, admissionv1.AdmissionReview{})
	sameReview(t, admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{Kind: "<", APIVersion: "\xff"}})
	// A request is written by encoding/json; one it cannot write takes the error path.
	sameReview(t, admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{UID: "u"}, Response: &full.AdmissionResponse})
	sameReview(t, admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{Object: runtime.RawExtension{Raw: []byte("{")}}})
}

// errWriter fails every write and counts them.
type errWriter struct{ writes int }

func (w *errWriter) Write([]byte) (int, error) {
	w.writes++
	return 0, errors.New("connection reset")
}

// A failing write takes the framework's path: the error answer is tried once more.
func TestWriteReviewWriteError(t *testing.T) {
	var w errWriter
	writeReview(&w, reviewOf(admission.Allowed(""), "u", true))
	if w.writes != 2 {
		t.Errorf("%d writes, want 2 (the review, then the error answer)", w.writes)
	}
}

func FuzzAppendReview(f *testing.F) {
	for i, h := range hostile {
		f.Add(h, hostile[(i+1)%len(hostile)], i%2 == 0, int32(200+i), []byte(h), h)
	}
	f.Fuzz(func(t *testing.T, uid, msg string, allowed bool, code int32, patch []byte, warning string) {
		r := admission.ValidationResponse(allowed, msg)
		r.Result.Code, r.Result.Reason = code, metav1.StatusReason(warning)
		if len(patch) > 0 {
			r.Patch, r.PatchType = patch, ptr.To(admissionv1.PatchType(uid))
		}
		if code%2 == 0 {
			r.Warnings = []string{warning, msg}
			r.AuditAnnotations = map[string]string{uid: msg, warning: uid}
		}
		if code%3 == 0 {
			r.Result = nil
		}
		sameReview(t, reviewOf(r, uid, code%5 != 0))
	})
}

// BenchmarkWriteReview: the 4-PVC pod's answer, written by reviewjson.go and by encoding/json.
func BenchmarkWriteReview(b *testing.B) {
	var ops []jsonpatch.JsonPatchOperation
	for range 20 {
		ops = append(ops, jsonpatch.JsonPatchOperation{Operation: "add", Path: "/spec/containers/0/volumeMounts/-", Value: "a value of some length"})
	}
	raw, err := marshalPatch(ops)
	if err != nil {
		b.Fatal(err)
	}
	r := admission.Patched("").WithWarnings("pvrescue: a warning")
	r.Patch, r.PatchType = raw, ptr.To(admissionv1.PatchTypeJSONPatch)
	ar := reviewOf(r, "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	var w bytes.Buffer
	for _, m := range []struct {
		name string
		fn   func(io.Writer, admissionv1.AdmissionReview)
	}{{"reviewjson", writeReview}, {"encoding-json", writeReviewReference}} {
		b.Run(m.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w.Reset()
				m.fn(&w, ar)
			}
		})
	}
}

// BenchmarkAppendPatchAndReview is the 4-PVC pod's patch and answer written with the append forms
// into reused buffers, as a pooled ServeHTTP would: what remains per admission is what the
// encoders themselves allocate (a quantity without its text cached costs a few).
func BenchmarkAppendPatchAndReview(b *testing.B) {
	objs, err := workload.Objects(testConfig())
	if err != nil {
		b.Fatal(err)
	}
	ops := newDefaulter(objs...).Default(b.Context(), workload.Namespace, workload.FourPVCPod()).Patch
	r := admission.Patched("").WithWarnings("pvrescue: a warning")
	r.PatchType = ptr.To(admissionv1.PatchTypeJSONPatch)
	ar := reviewOf(r, "705ab4f5-6393-11e8-b7cc-42010a800002", true)
	var patch, out []byte
	b.ReportAllocs()
	for b.Loop() {
		if patch, err = appendPatch(patch[:0], ops); err != nil {
			b.Fatal(err)
		}
		ar.Response.Patch = patch
		if out, err = appendReview(out[:0], &ar); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(out)), "response-bytes")
}
