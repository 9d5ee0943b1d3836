package main

import (
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
