package s3mount

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

// The periodic pass is a safety net while the node is healthy, and fast only while a
// time-driven step (bridgeAfter, backoff, a bridge waiting for its driver) may be due.
func TestNextCheckInFollowsWhatIsUnderWay(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.start()
	w.settle()
	if got := w.r.nextCheckIn(); got != time.Minute {
		t.Fatalf("healthy node: next check in %s, want the shipped s3.checkInterval 1m", got)
	}

	w.node.KillMount(target)
	w.sync()
	if got := w.r.nextCheckIn(); got != time.Second {
		t.Fatalf("dead target counting towards bridgeAfter: next check in %s, want s3.pendingCheckInterval 1s", got)
	}
	w.waitFor("bridge on the dead target", func() bool { return len(w.node.Table().Stack(target)) == 2 })
	if got := w.r.nextCheckIn(); got != time.Second {
		t.Fatalf("bridge serving, waiting for its driver: next check in %s, want 1s", got)
	}
}

func TestNextCheckInNeverExceedsCheckInterval(t *testing.T) {
	w := newWorld(t, standard(false)...)
	w.configure = func(c *config.Config) {
		c.S3.CheckInterval = metav1.Duration{Duration: 500 * time.Millisecond}
		c.S3.PendingCheckInterval = metav1.Duration{Duration: 2 * time.Second}
	}
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	if got := w.r.nextCheckIn(); got != 500*time.Millisecond {
		t.Fatalf("pending with pendingCheckInterval above checkInterval: next check in %s, want 500ms", got)
	}
}

// A gone pod's target that still holds a mount we put there (kubelet's teardown under way)
// keeps the fast cadence, so our part of the teardown does not wait for the safety-net pass; one
// holding only the driver's mount (nothing of ours to act on) does not.
func TestNextCheckInWhileAGonePodIsTornDown(t *testing.T) {
	t.Run("the driver's mount only", func(t *testing.T) {
		w := newWorld(t, standard(false)...)
		w.publish("uid-1", "pv-a")
		w.start()
		w.view.DeletePod("default", "app")
		w.sync()
		if got := w.r.nextCheckIn(); got != time.Minute {
			t.Fatalf("gone pod's target holding only the driver's mount: next check in %s, want 1m", got)
		}
	})
	t.Run("our replayed mount", func(t *testing.T) {
		w, target := replayWorld(t, false)
		w.node.KillMount(target)
		w.start()
		w.view.DeletePod("default", "app")
		w.sync()
		if got := w.r.nextCheckIn(); got != time.Second {
			t.Fatalf("gone pod's target still holding our replayed mount: next check in %s, want 1s", got)
		}
		if err := fakeOS(w.node).Mounter.Unmount(target, false); err != nil { // the driver's top-only unpublish
			t.Fatal(err)
		}
		w.sync() // the agent finishes kubelet's teardown
		if n := len(w.node.Table().Stack(target)); n != 0 {
			t.Fatalf("target after the finished teardown: %d mounts", n)
		}
		if got := w.r.nextCheckIn(); got != time.Minute {
			t.Fatalf("gone pod's target torn down: next check in %s, want 1m", got)
		}
	})
}

// A restore that failed while the API server was away (its Secret unreadable) is retried as
// soon as it answers again, not after the back-off.
func TestRetryNowEndsTheBackOff(t *testing.T) {
	objs := []runtime.Object{storageClass(), pvObj("pv-a", testDriver, false), pvcObj("data", "pv-a"), podObj("app", "uid-1", "data", false)}
	w := newWorld(t, objs...)
	target := w.publish("uid-1", "pv-a")
	w.node.KillMount(target)
	w.start()
	failed := func() int {
		return w.events.Count(corev1.EventTypeWarning, contract.ReasonMountRestoreFailed, "SecretNotFound:")
	}
	if failed() != 1 {
		t.Fatalf("first restore without the Secret: %d failure events, want 1", failed())
	}
	w.sync()
	if failed() != 1 {
		t.Fatalf("a pass within the back-off retried: %d failure events, want 1", failed())
	}
	w.view.Set(secretObj("creds", goodSecret))
	w.r.retryNow(w.ctx)
	w.sync() // no clock step: the back-off (2 s) has not run out
	if got := len(w.node.Table().Stack(target)); got != 2 {
		t.Fatalf("after retryNow the restore did not run: target depth %d, want 2 (bridge over the dead mount)", got)
	}
}

// A plugin socket that appears while a bridge waits for its driver brings the next pass within
// 50 ms for two seconds: the socket exists before the plugin answers, and a pass that found it
// down would otherwise wait the whole pending interval before the hand-back.
func TestNextCheckInJustAfterAPluginSocketAppears(t *testing.T) {
	w := newWorld(t, standard(false)...)
	target := w.publish("uid-1", "pv-a")
	w.start()
	w.settle()
	w.r.socketAppeared()
	if got := w.r.nextCheckIn(); got != time.Minute {
		t.Fatalf("socket appeared, nothing under way: next check in %s, want 1m", got)
	}
	w.node.KillMount(target)
	w.sync()
	w.r.socketAppeared()
	if got := w.r.nextCheckIn(); got != 50*time.Millisecond {
		t.Fatalf("socket just appeared, dead target: next check in %s, want 50ms", got)
	}
	w.clock.Step(1900 * time.Millisecond)
	if got := w.r.nextCheckIn(); got != 50*time.Millisecond {
		t.Fatalf("1.9 s after the socket: next check in %s, want 50ms", got)
	}
	w.clock.Step(200 * time.Millisecond)
	if got := w.r.nextCheckIn(); got != time.Second {
		t.Fatalf("2.1 s after the socket: next check in %s, want s3.pendingCheckInterval 1s", got)
	}
}

// A plugin that refused a replay (its own restart killed the daemon it started: "s3fs exited
// before mounting", the bench's "restarted twice") is asked again at once once a new plugin's
// socket appears — during the failed pass or after it — not after the back-off (2 s: issue 54's
// 2.3 s incidents). Without a new socket the back-off holds.
func TestANewPluginSocketEndsTheBackOffOfAFailedReplay(t *testing.T) {
	for _, tc := range []struct {
		name         string
		duringPass   bool
		afterPass    bool
		wantReplayed bool
	}{
		{name: "socket appears while the replay fails", duringPass: true, wantReplayed: true},
		{name: "socket appears during the back-off", afterPass: true, wantReplayed: true},
		{name: "no new socket", wantReplayed: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, target := replayWorld(t, false)
			refusals := 1
			w.csi.Refuse = func() error {
				if refusals == 0 {
					return nil
				}
				refusals--
				if tc.duringPass {
					w.r.socketAppeared() // the successor binds its socket as the old plugin's call fails
				}
				return errors.New("rpc error: code = Internal desc = s3fs exited before mounting")
			}
			w.node.KillMount(target)
			w.start()
			if n := len(w.csi.Publish); n != 1 {
				t.Fatalf("NodePublishVolume calls after the first pass: %d, want 1 (refused)", n)
			}
			if tc.afterPass {
				w.r.socketAppeared()
			}
			w.sync() // no clock step: the 2 s back-off has not run out
			replayed := len(w.csi.Publish) == 2
			if replayed != tc.wantReplayed {
				t.Fatalf("replayed again before the back-off ran out: %t, want %t (NodePublishVolume calls %d)", replayed, tc.wantReplayed, len(w.csi.Publish))
			}
			if !tc.wantReplayed {
				return
			}
			if err := fakeOS(w.node).Statfs.Statfs(context.Background(), target, time.Second); err != nil {
				t.Fatalf("target after the second replay: %v", err)
			}
		})
	}
}
