package webhook

import (
	"strings"

	jsonpatch "gomodules.xyz/jsonpatch/v2"
)

// patch records JSON patch (RFC 6902) operations as Inject decides them. Paths index arrays as
// the request's object has them at that point of the sequence, so the operations are applied in
// the order recorded.
type patch []jsonpatch.JsonPatchOperation

// patchCap is room for the operations of a usual pod (a 4-PVC pod takes 7), allocated once
// instead of grown from one.
const patchCap = 8

func (p *patch) push(op jsonpatch.JsonPatchOperation) {
	if *p == nil {
		*p = make(patch, 0, patchCap)
	}
	*p = append(*p, op)
}

func (p *patch) add(path string, value any) {
	p.push(jsonpatch.JsonPatchOperation{Operation: "add", Path: path, Value: value})
}

func (p *patch) replace(path string, value any) {
	p.push(jsonpatch.JsonPatchOperation{Operation: "replace", Path: path, Value: value})
}

func (p *patch) remove(path string) {
	p.push(jsonpatch.JsonPatchOperation{Operation: "remove", Path: path})
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
