package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/pvrescue/pvrescue/hack/bench/workload"
)

// The raw floor answers a real AdmissionReview as the apiserver expects (same uid, allowed, no
// patch) and refuses what is not one.
func TestRawFloorHandler(t *testing.T) {
	body, err := workload.ReviewBody(workload.ManagedFieldsPod(64 << 10))
	if err != nil {
		t.Fatal(err)
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	rawFloorHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, rawFloorPath, strings.NewReader(string(body))))
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("response %q: %v", rec.Body.String(), err)
	}
	if out.Response == nil || !out.Response.Allowed || out.Response.UID != in.Request.UID || out.Response.Patch != nil ||
		out.Kind != "AdmissionReview" || out.APIVersion != "admission.k8s.io/v1" {
		t.Fatalf("response = %s", rec.Body.String())
	}
	rec = httptest.NewRecorder()
	rawFloorHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, rawFloorPath, strings.NewReader(`{}`)))
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("empty review: %d, want 400", rec.Code)
	}
}
