package testenv

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseMountInfo(t *testing.T) {
	in := `22 1 0:21 / / rw,relatime - ext4 /dev/vda rw
35 22 0:30 / /tmp/a\040b rw shared:5 - fuse.s3fs s3fs rw,user_id=0
short line
x 22 0:30 / /bad rw - tmpfs tmpfs rw
`
	got := parseMountInfo(in)
	want := []Mount{{ID: 22, MountPoint: "/", FSType: "ext4"}, {ID: 35, MountPoint: "/tmp/a b", FSType: "fuse.s3fs"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestLoopMinor(t *testing.T) {
	for in, want := range map[string]int{"loop0": 0, "loop201": 201, "/dev/loop9": 9} {
		if n, ok := loopMinor(in); !ok || n != want {
			t.Errorf("loopMinor(%q) = %d, %v; want %d", in, n, ok, want)
		}
	}
	for _, in := range []string{"loop", "loop-control", "loopx", "sda"} {
		if _, ok := loopMinor(in); ok {
			t.Errorf("loopMinor(%q) accepted", in)
		}
	}
	r := LoopRange{First: 200, Last: 299}
	if !r.Contains(200) || !r.Contains(299) || r.Contains(300) || r.Contains(101) {
		t.Errorf("%s: Contains is wrong at its edges", r)
	}
}

func TestPollReturnsWhenTrue(t *testing.T) {
	calls := 0
	err := Poll(t.Context(), time.Millisecond, func(context.Context) (bool, error) {
		calls++
		if calls < 3 {
			return false, errors.New("not yet")
		}
		return true, nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Poll = %v after %d calls, want nil after 3", err, calls)
	}
}

func TestPollTimesOutWithLastReason(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	err := Poll(ctx, time.Millisecond, func(context.Context) (bool, error) {
		calls++
		if calls == 2 {
			cancel()
		}
		return false, errors.New("reason " + strings.Repeat("!", calls))
	})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "last: reason !!") {
		t.Fatalf("Poll = %v, want context.Canceled with the last reason", err)
	}
}

func TestWaitForAndUntil(t *testing.T) {
	n := 0
	WaitFor(t, 10*time.Second, "the third call", Until(func() bool { n++; return n == 3 }))
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}

func TestPickPortAndListening(t *testing.T) {
	p := FreePort(t)
	addr := Addr("127.0.0.1", p)
	if ok, err := Listening(t.Context(), addr); ok || err == nil {
		t.Fatalf("nothing listens on a fresh free port, yet Listening = %v, %v", ok, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port PickPort returned cannot be listened on: %v", err)
	}
	defer func() { _ = l.Close() }() // the test only needs it open
	if ok, err := Listening(t.Context(), addr); !ok || err != nil {
		t.Fatalf("Listening(%s) = %v, %v with a listener there", addr, ok, err)
	}
}

func TestS3ConfigKeepsKeysOffTheCommandLine(t *testing.T) {
	c := S3Config{Addr: "127.0.0.1:7070", Dir: "/d", AccessKey: "AK", SecretKey: "SK"}
	if got := strings.Join(c.Args(), " "); got != "--port 127.0.0.1:7070 posix /d" {
		t.Errorf("Args = %q", got)
	}
	if got := strings.Join(c.Env(), " "); got != "ROOT_ACCESS_KEY_ID=AK ROOT_SECRET_ACCESS_KEY=SK" {
		t.Errorf("Env = %q", got)
	}
	if c.Endpoint() != "http://127.0.0.1:7070" {
		t.Errorf("Endpoint = %q", c.Endpoint())
	}
}

func TestPollAbortEndsAtOnce(t *testing.T) {
	gone := errors.New("server exited")
	calls := 0
	err := Poll(t.Context(), time.Millisecond, func(context.Context) (bool, error) {
		calls++
		return false, Abort(gone)
	})
	if !errors.Is(err, gone) || calls != 1 {
		t.Fatalf("Poll = %v after %d calls, want the aborting error after 1", err, calls)
	}
}

func TestWaitUntil(t *testing.T) {
	n := 0
	if err := WaitUntil(t.Context(), time.Second, time.Millisecond, func() bool { n++; return n == 3 }); err != nil || n != 3 {
		t.Fatalf("WaitUntil = %v after %d checks, want nil after 3", err, n)
	}
	start := time.Now()
	err := WaitUntil(t.Context(), 30*time.Millisecond, time.Millisecond, func() bool { return false })
	if err == nil {
		t.Fatal("WaitUntil of a predicate that never holds returned nil")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("WaitUntil took %s past a 30ms timeout", took)
	}
}
