package csiclient

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A replayed call whose plugin went away under it (gRPC Unavailable: the connection closed as the
// plugin restarted again) is the plugin not answering — the restore bridges or waits for the
// next plugin — not a refusal, which backs the restore off.
func TestReplayErrTellsAPluginGoneFromARefusal(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		down, refd bool
	}{
		{"connection closed mid-call", status.Error(codes.Unavailable, "error reading from server: EOF"), true, false},
		{"refused", status.Error(codes.Internal, "mount failed"), false, true},
		{"bad request", status.Error(codes.InvalidArgument, "no volume capability"), false, true},
		{"deadline", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := replayErr("NodePublishVolume", wentAway(tc.err))
			if got := errors.Is(err, ErrDriverDown); got != tc.down {
				t.Errorf("errors.Is(%v, ErrDriverDown) = %v, want %v", err, got, tc.down)
			}
			if got := errors.Is(err, ErrReplay); got != tc.refd {
				t.Errorf("errors.Is(%v, ErrReplay) = %v, want %v", err, got, tc.refd)
			}
		})
	}
	if wentAway(nil) != nil {
		t.Error("wentAway(nil) is not nil")
	}
}
