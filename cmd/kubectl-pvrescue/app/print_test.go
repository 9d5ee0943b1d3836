package app

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// failAfter fails every write after the first n bytes.
type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, f.err
	}
	f.n -= len(p)
	return len(p), nil
}

func TestPrintTables(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	since := now.Add(-5 * time.Minute)
	r := &StatusReport{Nodes: []NodeStatus{{Name: "n1"}, {Name: "n2", Items: []StatusRow{{Kind: RowFakeDevice, PV: "pv1",
		Path: "/dev/disk/by-id/d1", Device: "/dev/loop101", Since: &since}}}}, Notes: []string{"a note"}}
	var b bytes.Buffer
	if err := PrintStatus(&b, OutputWide, now, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NODE  KIND", "n1    ok", "n2    fake-device  pv1  <none>  /dev/disk/by-id/d1  /dev/loop101  5m",
		"Unprotected pods: none", "Note: a note"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("no %q in\n%s", want, b.String())
		}
	}
}

// A write error anywhere in a report (the pipe to `head` closed) is returned, not dropped.
func TestPrintReturnsWriteError(t *testing.T) {
	broken := errors.New("broken pipe")
	now := time.Now()
	r := &StatusReport{Nodes: []NodeStatus{{Name: "n1"}}, Unprotected: []PodRef{{Namespace: "app", Name: "p"}}}
	e := &Explanation{Namespace: "app", Name: "p", Volumes: []VolumeExplain{{Name: "d"}}, Events: []EventRow{{Reason: "x"}}}
	for _, n := range []int{0, 10, 100, 200} {
		if err := PrintStatus(&failAfter{n: n, err: broken}, OutputTable, now, r); !errors.Is(err, broken) {
			t.Errorf("status, failing after %d bytes: %v", n, err)
		}
		if err := PrintExplanation(&failAfter{n: n, err: broken}, OutputTable, now, e); !errors.Is(err, broken) {
			t.Errorf("explain, failing after %d bytes: %v", n, err)
		}
	}
}
