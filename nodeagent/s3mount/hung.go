package s3mount

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
	"github.com/pvrescue/pvrescue/nodeagent/s3mount/stack"
)

// Hung mounts: statfs times out while the FUSE daemon still holds the connection (a killed
// daemon's connection is aborted by the kernel, and statfs then fails at once with ENOTCONN).
// The daemon may answer again — a slow S3 endpoint, throttling, a stopped or swapped-out
// process — and would then still write what it buffered. So a hung mount is never replaced:
// no second daemon, nothing stacked. It is reported (Event MountHung, metric, Node condition
// S3MountHung after s3.hungConditionAfter), and with s3.abortHungAfter set its connection is
// aborted through fusectl after that long; the mount is then dead and restored as such.
//
// Never our own bridge: a target served by the agent's s3fs (its bind, fsname pvrescue-s3:<pv>)
// is judged by the bridge's own health, which its Supervisor watches (its process through a
// pidfd, its mount): a bridge busy with a tenant's writes answers statfs late but is alive, and
// aborting its connection would give every pod on the PV ENOTCONN and lose its unflushed
// writes. A bridge whose s3fs exits leaves a dead mount (ENOTCONN), restored as such.

// onHung handles one pass's view of a hung target: the first time an Event, then — with
// s3.abortHungAfter — the abort once it has been hung that long.
func (r *Restorer) onHung(ctx context.Context, t target, since time.Time, first bool) {
	log := logr.FromContextOrDiscard(ctx)
	after := r.cfg.S3.AbortHungAfter.Duration
	due := after > 0 && r.clk.Since(since) >= after
	if !first && !due {
		return
	}
	table, terr := r.os.Mounter.MountTable()
	top, topOK := stack.Mount{}, false
	if terr == nil {
		top, topOK = table.Top(t.path)
	}
	_, bridged := stack.PVFromFSName(top.Source)
	bridged = topOK && bridged
	if first {
		r.metrics.HungFound.Inc()
		if bridged {
			log.Info("S3 mount served by our bridge answers late; the bridge is judged by its own health and never aborted", "pod", klogRef(t.pod), "pv", t.pv, "path", t.path)
			r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, contract.ReasonMountHung,
				"S3 volume %s, served by pvrescue's bridge, does not answer (statfs timed out) while the bridge's s3fs runs: nothing is replaced, stacked or aborted; reads and writes wait until it answers",
				t.pv)
		} else {
			log.Info("S3 mount hung: its daemon holds the connection but does not answer; waiting", "pod", klogRef(t.pod), "pv", t.pv, "path", t.path)
			r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, contract.ReasonMountHung,
				"S3 volume %s does not answer (statfs timed out) while its FUSE daemon still runs: nothing is replaced or stacked; reads and writes wait until it answers%s",
				t.pv, r.abortNote())
		}
	}
	if !due {
		return
	}
	if r.os.FUSE == nil || !topOK || !stack.IsFUSE(top.FSType) {
		return
	}
	if bridged {
		return // never our own bridge (see above)
	}
	if err := r.os.FUSE.Abort(top.Dev); err != nil {
		log.Error(err, "aborting the hung FUSE connection", "path", t.path, "dev", top.Dev)
		r.metrics.HungAborts.WithLabelValues("failure").Inc()
		return
	}
	r.metrics.HungAborts.WithLabelValues("success").Inc()
	log.Info("aborted the hung FUSE connection; the mount is dead now and gets restored", "path", t.path, "dev", top.Dev, "hungFor", r.clk.Since(since))
	r.d.Recorder.Eventf(t.pod, corev1.EventTypeWarning, contract.ReasonMountHungAborted,
		"S3 volume %s: hung for %s, its FUSE connection (device %s) aborted so its daemon cannot write late; restoring it",
		t.pv, r.clk.Since(since).Round(time.Second), top.Dev)
	r.poke()
}

func (r *Restorer) abortNote() string {
	if a := r.cfg.S3.AbortHungAfter.Duration; a > 0 {
		return fmt.Sprintf(" (its connection is aborted after %s, s3.abortHungAfter)", a)
	}
	return ""
}

// reportHung updates the hung gauge and the Node condition S3MountHung from the targets hung
// now. The condition is written on change only, and False only when it was True (from our
// last write, or on the Node as the agent found it).
func (r *Restorer) reportHung(ctx context.Context) {
	now := r.clk.Now()
	var long []string
	r.mu.Lock()
	n := len(r.hungSince)
	for path, since := range r.hungSince {
		if now.Sub(since) >= r.cfg.S3.HungConditionAfter.Duration {
			long = append(long, path)
		}
	}
	r.mu.Unlock()
	r.metrics.MountsHung.Set(float64(n))
	sort.Strings(long)
	cond := corev1.NodeCondition{Type: contract.ConditionS3MountHung, Status: corev1.ConditionFalse,
		Reason: "S3MountsAnswer", Message: "no S3 volume mount on this node is hung"}
	if len(long) > 0 {
		cond.Status, cond.Reason = corev1.ConditionTrue, "S3MountHung"
		cond.Message = fmt.Sprintf("%d S3 volume mount(s) hung for at least %s: %s", len(long), r.cfg.S3.HungConditionAfter.Duration, strings.Join(long, ", "))
	}
	key := string(cond.Status) + "|" + cond.Message
	if key == r.lastHungCondition {
		return
	}
	var existing *corev1.NodeCondition
	if node, err := r.d.View.Node(); err == nil {
		for i := range node.Status.Conditions {
			if node.Status.Conditions[i].Type == contract.ConditionS3MountHung {
				existing = &node.Status.Conditions[i]
			}
		}
	}
	if cond.Status == corev1.ConditionFalse && r.lastHungCondition == "" && (existing == nil || existing.Status != corev1.ConditionTrue) {
		r.lastHungCondition = key // never set by us, nothing to clear
		return
	}
	cond.LastHeartbeatTime = metav1.NewTime(now)
	cond.LastTransitionTime = metav1.NewTime(now)
	if existing != nil && existing.Status == cond.Status {
		cond.LastTransitionTime = existing.LastTransitionTime
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if _, err := r.d.Client.CoreV1().Nodes().PatchStatus(ctx, r.d.NodeName, patch); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "patch node condition", "condition", contract.ConditionS3MountHung)
		return
	}
	r.lastHungCondition = key
}
