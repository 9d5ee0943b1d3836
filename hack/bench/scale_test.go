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

func TestPprofTop(t *testing.T) {
	out := `File: pvrescue-agent-prof
Type: cpu
Duration: 20s, Total samples = 120ms ( 0.6%)
Showing nodes accounting for 120ms, 100% of 120ms total
      flat  flat%   sum%        cum   cum%
         0     0%     0%      100ms 83.33%  runtime.goexit
      10ms  8.33%  8.33%       60ms 50.00%  github.com/pvrescue/pvrescue/nodeagent/s3mount.(*Restorer).check
      20ms 16.67% 25.00%       20ms 16.67%  syscall.Syscall6 (inline)
`
	if got := PprofTotal(out); got != "120ms ( 0.6%)" {
		t.Errorf("PprofTotal = %q", got)
	}
	got := PprofTop(out, 5, func(fn string) bool { return fn != "runtime.goexit" })
	want := []string{
		"github.com/pvrescue/pvrescue/nodeagent/s3mount.(*Restorer).check (flat 10ms 8.33%, cum 60ms 50.00%)",
		"syscall.Syscall6 (inline) (flat 20ms 16.67%, cum 20ms 16.67%)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("PprofTop =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
