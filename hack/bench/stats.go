package main

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// Percentile returns the p-th percentile (0 < p <= 100) of ds by the nearest-rank method; ds
// need not be sorted and is not modified. It returns 0 for no samples.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	if rank > len(s) {
		rank = len(s)
	}
	return s[rank-1]
}

// Ratio formats a/b as "N.NN×" (with "1/N" when below 0.1), or "n/a" when b is zero.
func Ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	r := a / b
	if r > 0 && r < 0.1 {
		// Far below the baseline: "1/N" reads better than a row of zeros.
		return fmt.Sprintf("%.3f× (1/%.0f)", r, 1/r)
	}
	return fmt.Sprintf("%.2f×", r)
}

// Ms formats a duration in milliseconds with a precision suited to its size.
func Ms(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.1f ms", ms)
	default:
		return fmt.Sprintf("%.2f s", ms/1000)
	}
}

// Verdict says whether a figure met its target ("met"/"MISSED") and by how much.
func Verdict(value, target float64, unit string) string {
	if value < target {
		// Enough digits that a value just under the target does not print as equal to it.
		return fmt.Sprintf("met (%.4g %s < %.4g %s)", value, unit, target, unit)
	}
	return fmt.Sprintf("MISSED by %.3g %s (%.3g %s ≥ %.3g %s, %.2f× the target)", value-target, unit, value, unit, target, unit, value/target)
}

// SignTestP is the one-sided sign test's p-value: the chance of k or more of n paired
// differences falling one way when either way is as likely (binomial, p = 1/2). It returns 1
// for no pairs.
func SignTestP(k, n int) float64 {
	if n <= 0 || k <= 0 {
		return 1
	}
	p := 0.0
	for i := k; i <= n; i++ {
		// C(n, i) / 2^n through logarithms, exact enough for the few dozen pairs a section has.
		lg := func(x int) float64 { v, _ := math.Lgamma(float64(x) + 1); return v }
		p += math.Exp(lg(n) - lg(i) - lg(n-i) - float64(n)*math.Ln2)
	}
	return min(p, 1)
}

// PairedVerdict judges "a ≤ b" (target names it, e.g. "replace p50 ≤ 1.00× stacking") from n
// paired runs by the same one-sided sign test in both directions at p < 0.05: met when a was
// faster in significantly many of the pairs that differ, MISSED when it was slower in
// significantly many, and otherwise undecided — the p50 ratio r is reported, never the judge, so
// a ratio of 0.99 does not pass where 1.01 would not fail.
func PairedVerdict(target string, r float64, slower, faster int) string {
	differ := slower + faster
	pSlower, pFaster := SignTestP(slower, differ), SignTestP(faster, differ)
	pairs := fmt.Sprintf("p50 ratio %.2f×; slower in %d, faster in %d of %d paired runs that differ, sign test p = %.2g slower / %.2g faster", r, slower, faster, differ, pSlower, pFaster)
	switch {
	case pFaster < 0.05:
		return fmt.Sprintf("%s: met (%s)", target, pairs)
	case pSlower < 0.05:
		return fmt.Sprintf("%s: MISSED (%s)", target, pairs)
	}
	return fmt.Sprintf("%s: undecided, neither direction beyond the noise (%s)", target, pairs)
}
