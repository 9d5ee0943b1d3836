package main

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		p    float64
		want time.Duration
	}{
		{"empty", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"median odd unsorted", ms(5, 1, 3), 50, 3 * time.Millisecond},
		{"median even takes lower", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p99 of 100 is 99th", ms(seq(100)...), 99, 99 * time.Millisecond},
		{"p99 of 10 is max", ms(seq(10)...), 99, 10 * time.Millisecond},
		{"p100 is max", ms(3, 9, 1), 100, 9 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tc.in...)
			if got := Percentile(tc.in, tc.p); got != tc.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tc.in, tc.p, got, tc.want)
			}
			for i := range in {
				if in[i] != tc.in[i] {
					t.Fatalf("input modified: %v -> %v", in, tc.in)
				}
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestRatioAndVerdict(t *testing.T) {
	if got := Ratio(3, 2); got != "1.50×" {
		t.Errorf("Ratio(3,2) = %q", got)
	}
	if got := Ratio(23, 5000); got != "0.005× (1/217)" {
		t.Errorf("Ratio(23,5000) = %q", got)
	}
	if got := Ratio(1, 0); got != "n/a" {
		t.Errorf("Ratio(1,0) = %q", got)
	}
	if got := Verdict(4, 5, "ms"); got != "met (4 ms < 5 ms)" {
		t.Errorf("Verdict met = %q", got)
	}
	if got := Verdict(1.9984, 2, "s"); got != "met (1.998 s < 2 s)" {
		t.Errorf("Verdict just met = %q", got)
	}
	if got := Verdict(6, 5, "ms"); got != "MISSED by 1 ms (6 ms ≥ 5 ms, 1.20× the target)" {
		t.Errorf("Verdict missed = %q", got)
	}
}

func TestParseProcStat(t *testing.T) {
	// comm may hold spaces and parentheses; fields after it are counted from the last ')'.
	line := "1234 (pvrescue (x) a) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 555 1000 300 18446744073709551615"
	ut, st, err := ParseProcStat(line)
	if err != nil || ut != 250 || st != 75 {
		t.Fatalf("ParseProcStat = %d, %d, %v; want 250, 75, nil", ut, st, err)
	}
	if _, _, err := ParseProcStat("garbage"); err == nil {
		t.Error("ParseProcStat(garbage) succeeded")
	}
	rss, err := ParseVmRSS("Name:\tx\nVmRSS:\t   23456 kB\nThreads: 9\n")
	if err != nil || rss != 23456*1024 {
		t.Fatalf("ParseVmRSS = %d, %v", rss, err)
	}
	if _, err := ParseVmRSS("Name: x\n"); err == nil {
		t.Error("ParseVmRSS without VmRSS succeeded")
	}
}

func TestRequestKind(t *testing.T) {
	for _, tc := range []struct{ method, path, watch, want string }{
		{"GET", "/api/v1/namespaces/bench/persistentvolumeclaims/data-0", "", KindObjectRead},
		{"GET", "/apis/storage.k8s.io/v1/storageclasses/local-ssd", "", KindObjectRead},
		{"GET", "/api/v1/persistentvolumeclaims", "", KindList},
		{"GET", "/api/v1/namespaces/bench/persistentvolumeclaims", "", KindList},
		{"GET", "/apis/storage.k8s.io/v1/storageclasses", "true", KindWatch},
		{"POST", "/api/v1/namespaces/bench/persistentvolumeclaims", "", KindOther},
		{"GET", "/version", "", KindOther},
		{"GET", "/api/v1/namespaces/bench/pods/p/status", "", KindOther},
	} {
		if got := RequestKind(tc.method, tc.path, tc.watch); got != tc.want {
			t.Errorf("RequestKind(%s %s watch=%q) = %q, want %q", tc.method, tc.path, tc.watch, got, tc.want)
		}
	}
}

func TestParseBenchOutput(t *testing.T) {
	out := `goos: linux
pkg: github.com/pvrescue/pvrescue/hack/bench/gobench
BenchmarkClassify4PVC-2     	   10000	    207373 ns/op	    1200 B/op	      21 allocs/op
BenchmarkHandler/pod=4pvc/handler=floor-2         	     446	    672229 ns/op	   1.07 MB/s	   900000 p99-ns	  5000 B/op	  60 allocs/op
BenchmarkBroken-2 	 x 	 1 ns/op
PASS
`
	got := ParseBenchOutput(out)
	want := []BenchResult{
		{Name: "BenchmarkClassify4PVC", NsPerOp: 207373, BytesPerOp: 1200, AllocsOp: 21},
		{Name: "BenchmarkHandler/pod=4pvc/handler=floor", NsPerOp: 672229, BytesPerOp: 5000, AllocsOp: 60, P99Ns: 900000},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	if !hasBenchFor(out, "./hack/bench/gobench/") || hasBenchFor(out, "./webhook/") {
		t.Error("hasBenchFor wrong")
	}
}

func TestRawSamples(t *testing.T) {
	got := RawSamples([]string{"b", "a", "none"}, map[string][]time.Duration{
		"a": {1500 * time.Microsecond, 2 * time.Second},
		"b": {250 * time.Microsecond},
	})
	if want := "b 0.250\na 1.500 2000.000\nnone\n"; got != want {
		t.Errorf("RawSamples = %q, want %q", got, want)
	}
}

func TestSignTestP(t *testing.T) {
	for _, tc := range []struct {
		k, n int
		want float64
	}{
		{0, 0, 1}, {0, 5, 1}, {1, 1, 0.5}, {2, 2, 0.25}, {3, 4, 5.0 / 16},
		{15, 20, 21700.0 / 1048576}, {14, 20, 60460.0 / 1048576}, {20, 20, 1.0 / 1048576}, {10, 20, 616666.0 / 1048576},
	} {
		if got := SignTestP(tc.k, tc.n); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("SignTestP(%d, %d) = %.9f, want %.9f", tc.k, tc.n, got, tc.want)
		}
	}
}

func TestPairedVerdictSameTestBothWays(t *testing.T) {
	for _, tc := range []struct {
		name           string
		r              float64
		slower, faster int
		want           string
	}{
		{"faster in 9 of 10: met", 0.8, 1, 9, "x: met ("},
		{"slower in 9 of 10: missed", 1.2, 9, 1, "x: MISSED ("},
		// The old verdict passed any p50 ratio ≤ 1 and failed only with p < 0.05: 6 of 10 faster
		// with a ratio of 0.98 was "met"; the same evidence the other way was "within the noise".
		{"ratio below 1, no evidence: undecided", 0.98, 4, 6, "x: undecided"},
		{"ratio above 1, no evidence: undecided", 1.02, 6, 4, "x: undecided"},
		{"no pairs differ", 1, 0, 0, "x: undecided"},
	} {
		if got := PairedVerdict("x", tc.r, tc.slower, tc.faster); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: PairedVerdict = %q, want prefix %q", tc.name, got, tc.want)
		}
	}
}
