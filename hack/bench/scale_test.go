package main

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestRequestCounts(t *testing.T) {
	in := `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="persistentvolumes",scope="cluster",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="500",component="apiserver",dry_run="",group="",resource="persistentvolumes",scope="cluster",subresource="",verb="LIST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="persistentvolumes",scope="resource",subresource="",verb="GET",version="v1"} 700
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="nodes",scope="resource",subresource="status",verb="PATCH",version="v1"} 2
# TYPE other_total counter
other_total 5
`
	got, err := RequestCounts([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"LIST persistentvolumes": 4, "GET persistentvolumes": 700, "PATCH nodes/status": 2}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("RequestCounts (-want +got):\n%s", d)
	}
	if _, err := RequestCounts([]byte("apiserver_request_total{ 1\n")); err == nil {
		t.Error("malformed exposition accepted")
	}
}

func TestForEach(t *testing.T) {
	var seen [50]atomic.Int32
	if err := forEach(len(seen), 8, func(i int) error { seen[i].Add(1); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Errorf("f(%d) called %d times, want 1", i, n)
		}
	}
	boom := errors.New("boom")
	err := forEach(10, 3, func(i int) error {
		if i%5 == 0 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "2 errors") {
		t.Errorf("forEach with two failures = %v, want \"2 errors, first: boom\"", err)
	}
}
