package mountinfo

import (
	"slices"
	"testing"
)

// line is a test entry of the kind a parser keeps: Stack must work on any type.
type line struct {
	id, parent int
	point      string
}

func placeOf(l line) Place { return Place{ID: l.id, ParentID: l.parent, MountPoint: l.point} }

func ids(ls []line) []int {
	var out []int
	for _, l := range ls {
		out = append(out, l.id)
	}
	return out
}

func TestStack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		table []line
		at    string
		want  []int
	}{
		{name: "nothing mounted there", table: []line{{1, 0, "/"}, {2, 1, "/a"}}, at: "/b", want: nil},
		{name: "one mount", table: []line{{1, 0, "/"}, {2, 1, "/a"}}, at: "/a", want: []int{2}},
		{name: "in line order", table: []line{{1, 0, "/"}, {20, 1, "/t"}, {21, 20, "/t"}, {22, 21, "/t"}}, at: "/t", want: []int{20, 21, 22}},
		// A mount moved onto the target later can have a lower ID and come first: parents decide.
		{name: "out of line order", table: []line{{1, 0, "/"}, {9, 30, "/t"}, {30, 12, "/t"}, {12, 1, "/t"}}, at: "/t", want: []int{12, 30, 9}},
		{name: "other mount points ignored", table: []line{{1, 0, "/"}, {5, 1, "/t"}, {6, 5, "/t/sub"}, {7, 5, "/t"}, {8, 6, "/t/sub"}}, at: "/t", want: []int{5, 7}},
		// The bottom's parent lies outside the mount point (kubelet's dir, or the root).
		{name: "bottom parent elsewhere", table: []line{{40, 3, "/k/pods/x/mount"}, {41, 40, "/k/pods/x/mount"}}, at: "/k/pods/x/mount", want: []int{40, 41}},
		{name: "cycle: table order", table: []line{{1, 2, "/t"}, {2, 1, "/t"}}, at: "/t", want: []int{1, 2}},
		// Two entries on the same parent (malformed): the chain ends where it cannot continue.
		{name: "broken chain stops", table: []line{{1, 0, "/"}, {10, 1, "/t"}, {11, 10, "/t"}, {12, 99, "/t"}}, at: "/t", want: []int{10, 11}},
		{name: "exact mount point only", table: []line{{1, 0, "/"}, {2, 1, "/t/"}, {3, 1, "/t"}}, at: "/t", want: []int{3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ids(Stack(tc.table, tc.at, placeOf)); !slices.Equal(got, tc.want) {
				t.Errorf("Stack(%q) = %v, want %v", tc.at, got, tc.want)
			}
		})
	}
}
