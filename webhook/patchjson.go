package webhook

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"

	jsonpatch "gomodules.xyz/jsonpatch/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// A JSON writer for the values Inject puts into its patch, written for the bytes encoding/json
// gives (json.Marshal: HTML-escaped strings, sorted map keys, struct field order, omitempty as
// tagged). Reflection over containers, probes and resource quantities was a seventh of an
// admission. Anything not written here by hand — an unknown value type, a field Inject never
// sets — is handed to json.Marshal for that value alone, which gives the same bytes in place.
// TestPatchJSONKnowsEveryField fails when k8s.io/api adds a field to a struct written here.

// jsonBuf appends JSON to b; the first error (of a json.Marshal fallback) sticks.
type jsonBuf struct {
	b   []byte
	err error
}

// open starts an object; key uses the returned offset to know whether a comma is due.
func (e *jsonBuf) open() int {
	e.b = append(e.b, '{')
	return len(e.b)
}

func (e *jsonBuf) close() { e.b = append(e.b, '}') }

// key writes a member name (one that needs no escaping), preceded by a comma unless it is the
// first member of the object opened at start.
func (e *jsonBuf) key(start int, k string) {
	if len(e.b) != start {
		e.b = append(e.b, ',')
	}
	e.b = append(e.b, '"')
	e.b = append(e.b, k...)
	e.b = append(e.b, '"', ':')
}

func (e *jsonBuf) str(s string) { e.b = appendJSONString(e.b, s) }

// optStr writes member k with v unless v is empty (omitempty on a string).
func (e *jsonBuf) optStr(start int, k, v string) {
	if v != "" {
		e.key(start, k)
		e.str(v)
	}
}

func (e *jsonBuf) null() { e.b = append(e.b, "null"...) }

func (e *jsonBuf) bool(v bool) { e.b = strconv.AppendBool(e.b, v) }

func (e *jsonBuf) int(v int64) { e.b = strconv.AppendInt(e.b, v, 10) }

// marshal appends what json.Marshal gives for v.
func (e *jsonBuf) marshal(v any) {
	if e.err != nil {
		return
	}
	raw, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	e.b = append(e.b, raw...)
}

// list writes xs as a JSON array, each element by write.
func list[T any](e *jsonBuf, xs []T, write func(*jsonBuf, *T)) {
	e.b = append(e.b, '[')
	for i := range xs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		write(e, &xs[i])
	}
	e.b = append(e.b, ']')
}

// strs writes a string slice; nil is null, as encoding/json writes it.
func strs[S ~string](e *jsonBuf, ss []S) {
	if ss == nil {
		e.null()
		return
	}
	list(e, ss, func(e *jsonBuf, s *S) { e.str(string(*s)) })
}

// optStrs writes member k unless ss is empty (omitempty on a string slice).
func optStrs[S ~string](e *jsonBuf, start int, k string, ss []S) {
	if len(ss) > 0 {
		e.key(start, k)
		strs(e, ss)
	}
}

// optMarshal writes member k through json.Marshal unless v is nil (omitempty on a pointer).
func optMarshal[T any](e *jsonBuf, start int, k string, v *T) {
	if v != nil {
		e.key(start, k)
		e.marshal(v)
	}
}

// optList writes member k through json.Marshal unless v is empty (omitempty on a slice).
func optList[T any](e *jsonBuf, start int, k string, v []T) {
	if len(v) > 0 {
		e.key(start, k)
		e.marshal(v)
	}
}

// strMap writes a string map with its keys sorted, as encoding/json does.
func (e *jsonBuf) strMap(m map[string]string) {
	if m == nil {
		e.null()
		return
	}
	var buf [8]string
	keys := sortedKeys(m, buf[:])
	e.b = append(e.b, '{')
	for i, k := range keys {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.str(k)
		e.b = append(e.b, ':')
		e.str(m[k])
	}
	e.b = append(e.b, '}')
}

// sortedKeys returns m's keys sorted, in buf when they fit (callers pass a small array of their
// own, so the common map of a key or two costs no allocation).
func sortedKeys[K ~string, V any](m map[K]V, buf []K) []K {
	keys := buf[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// appendPatch appends ops as json.Marshal writes []patchOpJSON: add and replace always carry a
// value (null when nil), other operations only a non-nil one.
func appendPatch(dst []byte, ops []jsonpatch.JsonPatchOperation) ([]byte, error) {
	e := jsonBuf{b: append(dst, '[')}
	for i := range ops {
		op := &ops[i]
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.b = append(e.b, `{"op":`...)
		e.str(op.Operation)
		e.b = append(e.b, `,"path":`...)
		e.str(op.Path)
		switch {
		case op.Value != nil:
			e.b = append(e.b, `,"value":`...)
			e.value(op.Value)
		case op.Operation == "add" || op.Operation == "replace":
			e.b = append(e.b, `,"value":null`...)
		}
		e.b = append(e.b, '}')
	}
	e.b = append(e.b, ']')
	return e.b, e.err
}

// value writes the value of one operation: by hand for the types Inject and the handler put
// there, through json.Marshal otherwise.
func (e *jsonBuf) value(v any) {
	switch v := v.(type) {
	case nil:
		e.null()
	case string:
		e.str(v)
	case []string:
		strs(e, v)
	case map[string]string:
		e.strMap(v)
	case map[string]any:
		if v == nil {
			e.null()
			return
		}
		var buf [8]string
		e.b = append(e.b, '{')
		for i, k := range sortedKeys(v, buf[:]) {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.str(k)
			e.b = append(e.b, ':')
			e.value(v[k])
		}
		e.b = append(e.b, '}')
	case []any:
		if v == nil {
			e.null()
			return
		}
		list(e, v, func(e *jsonBuf, x *any) { e.value(*x) })
	case corev1.MountPropagationMode:
		e.str(string(v))
	case corev1.VolumeMount:
		e.volumeMount(&v)
	case corev1.Volume:
		e.volume(&v)
	case *corev1.Probe:
		e.probe(v)
	case corev1.Container:
		e.container(&v)
	case []corev1.Container:
		if v == nil {
			e.null()
			return
		}
		list(e, v, (*jsonBuf).container)
	default:
		e.marshal(v)
	}
}

func (e *jsonBuf) container(c *corev1.Container) {
	s := e.open()
	e.key(s, "name")
	e.str(c.Name)
	e.optStr(s, "image", c.Image)
	optStrs(e, s, "command", c.Command)
	optStrs(e, s, "args", c.Args)
	e.optStr(s, "workingDir", c.WorkingDir)
	optList(e, s, "ports", c.Ports)
	optList(e, s, "envFrom", c.EnvFrom)
	if len(c.Env) > 0 {
		e.key(s, "env")
		list(e, c.Env, (*jsonBuf).envVar)
	}
	// A struct: omitempty never leaves it out.
	e.key(s, "resources")
	e.resources(&c.Resources)
	optList(e, s, "resizePolicy", c.ResizePolicy)
	optMarshal(e, s, "restartPolicy", c.RestartPolicy)
	optList(e, s, "restartPolicyRules", c.RestartPolicyRules)
	if len(c.VolumeMounts) > 0 {
		e.key(s, "volumeMounts")
		list(e, c.VolumeMounts, (*jsonBuf).volumeMount)
	}
	if len(c.VolumeDevices) > 0 {
		e.key(s, "volumeDevices")
		list(e, c.VolumeDevices, func(e *jsonBuf, d *corev1.VolumeDevice) {
			e.b = append(e.b, `{"name":`...)
			e.str(d.Name)
			e.b = append(e.b, `,"devicePath":`...)
			e.str(d.DevicePath)
			e.b = append(e.b, '}')
		})
	}
	for _, p := range [...]struct {
		k string
		p *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if p.p != nil {
			e.key(s, p.k)
			e.probe(p.p)
		}
	}
	optMarshal(e, s, "lifecycle", c.Lifecycle)
	e.optStr(s, "terminationMessagePath", c.TerminationMessagePath)
	e.optStr(s, "terminationMessagePolicy", string(c.TerminationMessagePolicy))
	e.optStr(s, "imagePullPolicy", string(c.ImagePullPolicy))
	if c.SecurityContext != nil {
		e.key(s, "securityContext")
		e.securityContext(c.SecurityContext)
	}
	if c.Stdin {
		e.key(s, "stdin")
		e.bool(true)
	}
	if c.StdinOnce {
		e.key(s, "stdinOnce")
		e.bool(true)
	}
	if c.TTY {
		e.key(s, "tty")
		e.bool(true)
	}
	e.close()
}

func (e *jsonBuf) envVar(v *corev1.EnvVar) {
	s := e.open()
	e.key(s, "name")
	e.str(v.Name)
	e.optStr(s, "value", v.Value)
	optMarshal(e, s, "valueFrom", v.ValueFrom)
	e.close()
}

func (e *jsonBuf) resources(r *corev1.ResourceRequirements) {
	s := e.open()
	if len(r.Limits) > 0 {
		e.key(s, "limits")
		e.resourceList(r.Limits)
	}
	if len(r.Requests) > 0 {
		e.key(s, "requests")
		e.resourceList(r.Requests)
	}
	optList(e, s, "claims", r.Claims)
	e.close()
}

func (e *jsonBuf) resourceList(l corev1.ResourceList) {
	var buf [8]corev1.ResourceName
	e.b = append(e.b, '{')
	for i, k := range sortedKeys(l, buf[:]) {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.str(string(k))
		e.b = append(e.b, ':')
		e.quantity(l[k])
	}
	e.b = append(e.b, '}')
}

// quantity writes the text Quantity.MarshalJSON gives: the string it was parsed from when that
// is canonical, else the canonical form (String caches it on this copy only).
func (e *jsonBuf) quantity(q resource.Quantity) { e.str(q.String()) }

func (e *jsonBuf) volumeMount(m *corev1.VolumeMount) {
	s := e.open()
	e.key(s, "name")
	e.str(m.Name)
	if m.ReadOnly {
		e.key(s, "readOnly")
		e.bool(true)
	}
	if m.RecursiveReadOnly != nil {
		e.key(s, "recursiveReadOnly")
		e.str(string(*m.RecursiveReadOnly))
	}
	e.key(s, "mountPath")
	e.str(m.MountPath)
	e.optStr(s, "subPath", m.SubPath)
	if m.MountPropagation != nil {
		e.key(s, "mountPropagation")
		e.str(string(*m.MountPropagation))
	}
	e.optStr(s, "subPathExpr", m.SubPathExpr)
	optStrs(e, s, "bindMountOptions", m.BindMountOptions)
	e.close()
}

// volume writes the emptyDir volume Inject adds; a volume of any other source is marshalled.
func (e *jsonBuf) volume(v *corev1.Volume) {
	src := v.VolumeSource
	src.EmptyDir = nil
	if src != (corev1.VolumeSource{}) {
		e.marshal(*v) // a copy: v stays on its caller's stack on the emptyDir path
		return
	}
	s := e.open()
	e.key(s, "name")
	e.str(v.Name)
	if d := v.EmptyDir; d != nil {
		e.key(s, "emptyDir")
		ds := e.open()
		if d.Medium != "" {
			e.key(ds, "medium")
			e.str(string(d.Medium))
		}
		if d.SizeLimit != nil {
			e.key(ds, "sizeLimit")
			e.quantity(*d.SizeLimit)
		}
		if d.Mode != nil {
			e.key(ds, "mode")
			e.int(int64(*d.Mode))
		}
		e.close()
	}
	e.close()
}

func (e *jsonBuf) probe(p *corev1.Probe) {
	if p == nil {
		e.null()
		return
	}
	s := e.open()
	if p.Exec != nil {
		e.key(s, "exec")
		es := e.open()
		optStrs(e, es, "command", p.Exec.Command)
		e.close()
	}
	optMarshal(e, s, "httpGet", p.HTTPGet)
	optMarshal(e, s, "tcpSocket", p.TCPSocket)
	optMarshal(e, s, "grpc", p.GRPC)
	for _, f := range [...]struct {
		name string
		v    int32
	}{
		{"initialDelaySeconds", p.InitialDelaySeconds},
		{"timeoutSeconds", p.TimeoutSeconds},
		{"periodSeconds", p.PeriodSeconds},
		{"successThreshold", p.SuccessThreshold},
		{"failureThreshold", p.FailureThreshold},
	} {
		if f.v != 0 {
			e.key(s, f.name)
			e.int(int64(f.v))
		}
	}
	if p.TerminationGracePeriodSeconds != nil {
		e.key(s, "terminationGracePeriodSeconds")
		e.int(*p.TerminationGracePeriodSeconds)
	}
	e.close()
}

func (e *jsonBuf) securityContext(sc *corev1.SecurityContext) {
	s := e.open()
	if c := sc.Capabilities; c != nil {
		e.key(s, "capabilities")
		cs := e.open()
		optStrs(e, cs, "add", c.Add)
		optStrs(e, cs, "drop", c.Drop)
		e.close()
	}
	e.optBool(s, "privileged", sc.Privileged)
	optMarshal(e, s, "seLinuxOptions", sc.SELinuxOptions)
	optMarshal(e, s, "windowsOptions", sc.WindowsOptions)
	e.optInt(s, "runAsUser", sc.RunAsUser)
	e.optInt(s, "runAsGroup", sc.RunAsGroup)
	e.optBool(s, "runAsNonRoot", sc.RunAsNonRoot)
	e.optBool(s, "readOnlyRootFilesystem", sc.ReadOnlyRootFilesystem)
	e.optBool(s, "allowPrivilegeEscalation", sc.AllowPrivilegeEscalation)
	if sc.ProcMount != nil {
		e.key(s, "procMount")
		e.str(string(*sc.ProcMount))
	}
	if p := sc.SeccompProfile; p != nil {
		e.key(s, "seccompProfile")
		ps := e.open()
		e.key(ps, "type")
		e.str(string(p.Type))
		if p.LocalhostProfile != nil {
			e.key(ps, "localhostProfile")
			e.str(*p.LocalhostProfile)
		}
		e.close()
	}
	optMarshal(e, s, "appArmorProfile", sc.AppArmorProfile)
	e.close()
}

func (e *jsonBuf) optBool(start int, k string, v *bool) {
	if v != nil {
		e.key(start, k)
		e.bool(*v)
	}
}

func (e *jsonBuf) optInt(start int, k string, v *int64) {
	if v != nil {
		e.key(start, k)
		e.int(*v)
	}
}

// htmlSafe marks the ASCII bytes encoding/json copies into a string as they are: it escapes
// control characters, the quote, the backslash and (as json.Marshal does) <, > and &.
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\' && b != '<' && b != '>' && b != '&'
	}
	return t
}()

const hexDigits = "0123456789abcdef"

// appendJSONString appends s quoted as encoding/json quotes it with HTML escaping: short escapes
// for \b \f \n \r \t, \u00XX for the other control characters and <, >, &, \u2028 and \u2029
// escaped, each byte of invalid UTF-8 replaced by \ufffd.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if htmlSafe[b] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
