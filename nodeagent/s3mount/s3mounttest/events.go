package s3mounttest

import (
	"strings"
	"sync"

	"k8s.io/client-go/tools/record"
)

// eventBuffer is the FakeRecorder's channel size: Event blocks when it is full, so it holds every
// Event a test's restorer records between two reads.
const eventBuffer = 4096

// Events reads what a client-go record.FakeRecorder recorded, as localdisk's and
// containermount's tests read theirs: the test hands Recorder to the code under test and counts
// here. FakeRecorder keeps "<type> <reason> <message>" and not the object; every s3mount Event
// message names its volume ("S3 volume <pv>"), which is how a test tells pods apart.
type Events struct {
	Recorder *record.FakeRecorder

	mu   sync.Mutex
	seen []string
}

// NewEvents returns an empty record.
func NewEvents() *Events { return &Events{Recorder: record.NewFakeRecorder(eventBuffer)} }

// All returns every Event recorded so far, oldest first, as "<type> <reason> <message>".
func (e *Events) All() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for {
		select {
		case ev := <-e.Recorder.Events:
			e.seen = append(e.seen, ev)
		default:
			return append([]string(nil), e.seen...)
		}
	}
}

// Count counts the Events of that type and reason whose message starts with prefix.
func (e *Events) Count(typ, reason, prefix string) int {
	n := 0
	for _, ev := range e.All() {
		if strings.HasPrefix(ev, typ+" "+reason+" "+prefix) {
			n++
		}
	}
	return n
}
