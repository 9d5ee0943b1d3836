// Package gobench holds Go benchmarks of pvrescue's hot paths (classification, mutation, the
// admission handler beside a no-op floor, the guard's inspection), written against the exported
// APIs of packages webhook and sidecar. `make bench` runs them with -count and keeps the raw
// output for benchstat.
package gobench
