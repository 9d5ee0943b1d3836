package priority

import "testing"

func TestWeight(t *testing.T) {
	for _, tc := range []struct {
		nice int
		want uint64
	}{
		{0, 1024},
		{-10, 9548},
		{-20, 88761},
		{19, 15},
		{5, 335},
		{-21, 88761}, // clamped
		{20, 15},
	} {
		if got := Weight(tc.nice); got != tc.want {
			t.Errorf("Weight(%d) = %d, want %d", tc.nice, got, tc.want)
		}
	}
	// Each step up is a smaller weight: the table is in order.
	for n := -20; n < 19; n++ {
		if Weight(n) <= Weight(n+1) {
			t.Errorf("Weight(%d) = %d is not above Weight(%d) = %d", n, Weight(n), n+1, Weight(n+1))
		}
	}
}

// The values runc's ConvertCPUSharesToCgroupV2Value gives: kubelet's pod groups on v2 are
// weighed so, and ours must compare with them.
func TestCgroupV2Weight(t *testing.T) {
	for _, tc := range []struct{ shares, want uint64 }{
		{2, 1},
		{1024, 39},
		{2048, 79},
		{9548, 365},
		{262144, 10000},
		{0, 1},           // below the v1 range: its least
		{1 << 20, 10000}, // above: its most
	} {
		if got := CgroupV2Weight(tc.shares); got != tc.want {
			t.Errorf("CgroupV2Weight(%d) = %d, want %d", tc.shares, got, tc.want)
		}
	}
}
