package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
)

// rawFloorPath serves the raw floor: the least any admission webhook must do over the same TLS
// server — read the body, decode only the AdmissionReview envelope (apiVersion, kind,
// request.uid; the pod stays undecoded bytes) and answer allowed, with no framework, scheme or
// typed decode of the object.
const rawFloorPath = "/raw"

type rawEnvelope struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    *struct {
		UID    string          `json:"uid"`
		Object json.RawMessage `json:"object"`
	} `json:"request"`
}

// rawFloorHandler is the raw floor's handler.
func rawFloorHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var env rawEnvelope
		if err := json.Unmarshal(body, &env); err != nil || env.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		out := make([]byte, 0, 160)
		out = append(out, `{"apiVersion":`...)
		out = strconv.AppendQuote(out, env.APIVersion)
		out = append(out, `,"kind":`...)
		out = strconv.AppendQuote(out, env.Kind)
		out = append(out, `,"response":{"uid":`...)
		out = strconv.AppendQuote(out, env.Request.UID)
		out = append(out, `,"allowed":true}}`...)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(out)
	})
}
