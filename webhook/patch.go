package webhook

import (
	"encoding/json"
	"strings"

	jsonpatch "gomodules.xyz/jsonpatch/v2"
)

// patch records JSON patch (RFC 6902) operations as Inject decides them. Paths index arrays as
// the request's object has them at that point of the sequence, so the operations are applied in
// the order recorded.
type patch []jsonpatch.JsonPatchOperation

func (p *patch) add(path string, value any) {
	*p = append(*p, jsonpatch.JsonPatchOperation{Operation: "add", Path: path, Value: value})
}

func (p *patch) replace(path string, value any) {
	*p = append(*p, jsonpatch.JsonPatchOperation{Operation: "replace", Path: path, Value: value})
}

func (p *patch) remove(path string) {
	*p = append(*p, jsonpatch.JsonPatchOperation{Operation: "remove", Path: path})
}

// appendTo adds value at the end of the array at path, or creates the array when the object has
// none (absent, null or empty: adding the whole array is right for all three).
func (p *patch) appendTo(path string, length int, value any) {
	if length == 0 {
		p.add(path, []any{value})
		return
	}
	p.add(path+"/-", value)
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// escape makes a map key one JSON pointer segment (pvrescue.io/status → pvrescue.io~1status).
func escape(key string) string { return pointerEscaper.Replace(key) }

// patchOpJSON is one operation as jsonpatch's Operation.MarshalJSON writes it.
type patchOpJSON struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

var jsonNull = json.RawMessage("null")

// marshalPatch encodes ops to the bytes json.Marshal gives for them (add and replace always
// carry a value, null when nil; other operations carry none when nil) in one encoder pass:
// through Operation.MarshalJSON the encoder marshals each operation on its own and scans its
// bytes again, a fifth of a small pod's admission.
func marshalPatch(ops []jsonpatch.JsonPatchOperation) ([]byte, error) {
	out := make([]patchOpJSON, len(ops))
	for i, op := range ops {
		out[i] = patchOpJSON{Op: op.Operation, Path: op.Path, Value: op.Value}
		if op.Value == nil && (op.Operation == "add" || op.Operation == "replace") {
			out[i].Value = jsonNull
		}
	}
	return json.Marshal(out)
}
