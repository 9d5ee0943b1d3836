package statename

import (
	"strings"
	"testing"
)

func TestComponentKeepsShortAPINames(t *testing.T) {
	for _, n := range []string{"pv1", "local-pv-abc.def", "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", strings.Repeat("a", 250)} {
		if got := Component(n, ".json", 0); got != n+".json" {
			t.Errorf("Component(%q) = %q, want it unchanged (records of earlier agents keep their names)", n, got)
		}
	}
}

func TestComponentBoundsAndSanitises(t *testing.T) {
	long := strings.Repeat("p", 253)
	for _, tc := range []struct {
		name, suffix string
		reserve      int
	}{
		{long, ".json", 5}, {long, ".img", 5}, {long, "", 11}, {long + "x", ".passwd", 5},
		{"a/b", ".json", 0}, {"..", ".json", 0}, {".", "", 0}, {"", ".json", 0}, {".hidden", ".json", 0},
		{"nul\x00byte", ".json", 0}, {"../../etc/passwd", "", 0}, {"\u00a0\r\n", ".log", 0},
		{strings.Repeat("/", 300), ".json", 5}, {strings.Repeat(".", 300), "", 11},
	} {
		got := Component(tc.name, tc.suffix, tc.reserve)
		stem := strings.TrimSuffix(got, tc.suffix)
		switch {
		case len(got)+tc.reserve > NameMax:
			t.Errorf("Component(%q...) is %d bytes + %d reserved > %d", tc.name[:min(len(tc.name), 20)], len(got), tc.reserve, NameMax)
		case strings.ContainsAny(got, "/\x00"), stem == "", stem == ".", stem == "..", strings.HasPrefix(got, "."):
			t.Errorf("Component(%q) = %q: not one safe component", tc.name, got)
		case !strings.HasSuffix(got, tc.suffix):
			t.Errorf("Component(%q) = %q lost its suffix", tc.name, got)
		}
		// A stem read back from a file name maps to that same file.
		if again := Component(stem, tc.suffix, tc.reserve); again != got {
			t.Errorf("Component(stem %q) = %q, want %q", stem, again, got)
		}
	}
}

func TestComponentDistinguishesLongNames(t *testing.T) {
	a := strings.Repeat("a", 252) + "1"
	b := strings.Repeat("a", 252) + "2"
	if Component(a, ".json", 5) == Component(b, ".json", 5) {
		t.Error("two long names sharing a prefix map to one file")
	}
	// A hashed name never equals a plain API name ('~' is not in them).
	if !strings.Contains(Component(a, ".json", 5), "~") {
		t.Error("hashed name without the separator")
	}
}
