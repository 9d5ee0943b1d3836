package config

// The configuration reference is generated from this package (field doc comments, json tags,
// Default); a test in ./configref fails while the committed file is stale.
//go:generate go run ./configref/gen -src . -out ../../docs/config-reference.md
