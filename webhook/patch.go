package webhook

import (
	"bytes"
	"strings"
	"sync"

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

// patchBufs holds scratch buffers for marshalPatch: the patch is written into one, then copied
// out at its exact size.
var patchBufs = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledPatch keeps a rare huge patch's buffer out of the pool.
const maxPooledPatch = 256 << 10

// marshalPatch encodes ops to the bytes json.Marshal gives for them (add and replace always
// carry a value, null when nil; other operations carry none when nil) in one pass, writing the
// values Inject puts there by hand (patchjson.go): through Operation.MarshalJSON the encoder
// marshals each operation on its own and scans its bytes again, and reflection over containers
// and quantities was most of what remained.
func marshalPatch(ops []jsonpatch.JsonPatchOperation) ([]byte, error) {
	buf := patchBufs.Get().(*[]byte)
	b, err := appendPatch((*buf)[:0], ops)
	var out []byte
	if err == nil {
		out = bytes.Clone(b)
	}
	*buf = b
	putPatchBuf(buf)
	return out, err
}

// putPatchBuf returns a scratch buffer to patchBufs unless it grew too large to keep.
func putPatchBuf(buf *[]byte) {
	if cap(*buf) <= maxPooledPatch {
		*buf = (*buf)[:0]
		patchBufs.Put(buf)
	}
}
