package mountinfo

// Place is what Stack needs to know of one mountinfo line: its mount ID, its parent's mount ID
// and its mount point (unescaped).
type Place struct {
	ID, ParentID int
	MountPoint   string
}

// Stack returns the entries of table mounted at mountPoint from the bottom to the top, following
// parent IDs rather than line order (a mount stacked on another has the one below as parent, and
// mountinfo lines are not guaranteed to come in mount order). place reads an entry's IDs and
// mount point, so every parser's own line type can use it.
//
// The bottom is the entry whose parent is not itself mounted at mountPoint. When the entries do
// not form one chain (no bottom, as in a cycle of malformed input), they are returned in table
// order; a chain that breaks off ends the result there, and entries beside the chain are left out.
func Stack[M any](table []M, mountPoint string, place func(M) Place) []M {
	var at []M
	var places []Place
	for _, m := range table {
		if p := place(m); p.MountPoint == mountPoint {
			at = append(at, m)
			places = append(places, p)
		}
	}
	if len(at) <= 1 {
		return at
	}
	byParent := map[int]int{} // parent ID → index in at
	ids := map[int]bool{}
	for i, p := range places {
		byParent[p.ParentID] = i
		ids[p.ID] = true
	}
	bottom := -1
	for i, p := range places {
		if !ids[p.ParentID] {
			bottom = i
			break
		}
	}
	if bottom < 0 {
		return at
	}
	out := []M{at[bottom]}
	for cur := bottom; len(out) < len(at); {
		next, ok := byParent[places[cur].ID]
		if !ok {
			break
		}
		out = append(out, at[next])
		cur = next
	}
	return out
}
