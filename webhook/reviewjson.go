package webhook

import (
	"encoding/base64"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// appendReview appends ar and a newline, the bytes json.NewEncoder(w).Encode(ar) writes, for the
// reviews Webhook answers with (a response, no request); a request, a status's details and list
// metadata are marshalled by encoding/json. Reflection and the encoder's base64 of the patch
// were a tenth of an admission. TestPatchJSONKnowsEveryField covers the structs written here.
func appendReview(dst []byte, ar *admissionv1.AdmissionReview) ([]byte, error) {
	e := jsonBuf{b: dst}
	if ar.Request != nil {
		e.marshal(*ar) // a copy: ar stays on its caller's stack on the common path
		return append(e.b, '\n'), e.err
	}
	s := e.open()
	e.optStr(s, "kind", ar.Kind)
	e.optStr(s, "apiVersion", ar.APIVersion)
	if r := ar.Response; r != nil {
		e.key(s, "response")
		e.response(r)
	}
	e.close()
	return append(e.b, '\n'), e.err
}

func (e *jsonBuf) response(r *admissionv1.AdmissionResponse) {
	s := e.open()
	e.key(s, "uid")
	e.str(string(r.UID))
	e.key(s, "allowed")
	e.bool(r.Allowed)
	if r.Result != nil {
		e.key(s, "status")
		e.status(r.Result)
	}
	if len(r.Patch) > 0 {
		e.key(s, "patch")
		// Base64 needs no escaping.
		e.b = append(e.b, '"')
		e.b = base64.StdEncoding.AppendEncode(e.b, r.Patch)
		e.b = append(e.b, '"')
	}
	if r.PatchType != nil {
		e.key(s, "patchType")
		e.str(string(*r.PatchType))
	}
	if len(r.AuditAnnotations) > 0 {
		e.key(s, "auditAnnotations")
		e.strMap(r.AuditAnnotations)
	}
	optStrs(e, s, "warnings", r.Warnings)
	e.close()
}

func (e *jsonBuf) status(st *metav1.Status) {
	s := e.open()
	e.optStr(s, "kind", st.Kind)
	e.optStr(s, "apiVersion", st.APIVersion)
	// ListMeta is a struct, so omitempty never leaves it out; a response never has one set.
	e.key(s, "metadata")
	if st.ListMeta == (metav1.ListMeta{}) {
		e.b = append(e.b, '{', '}')
	} else {
		e.marshal(st.ListMeta)
	}
	e.optStr(s, "status", st.Status)
	e.optStr(s, "message", st.Message)
	e.optStr(s, "reason", string(st.Reason))
	optMarshal(e, s, "details", st.Details)
	if st.Code != 0 {
		e.key(s, "code")
		e.int(int64(st.Code))
	}
	e.close()
}
