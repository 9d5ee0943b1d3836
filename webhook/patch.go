package webhook

import (
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
