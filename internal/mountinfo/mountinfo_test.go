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
		`/max\377`:      "/max\xff",
		`/nul\000`:      "/nul\x00",
		`/end\`:         `/end\`,
		`\134134`:       `\134`,
		"/raw\r\v\f":    "/raw\r\v\f",
		"/nbsp\u00a0":   "/nbsp\u00a0",
		`/sign\+12`:     `/sign\+12`,
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}
