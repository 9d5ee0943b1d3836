package mountinfo

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/plain`:        "/plain",
		`/a\040b`:       "/a b",
		`/tab\011x`:     "/tab\tx",
		`/nl\012`:       "/nl\n",
		`/bs\134x`:      `/bs\x`,
		`/short\04`:     `/short\04`,
		`/notoctal\08x`: `/notoctal\08x`,
		`/big\777`:      `/big\777`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
