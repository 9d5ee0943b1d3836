package localdisk

import (
	"context"
	"encoding/json"
	"sort"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pvrescue/pvrescue/internal/contract"
)

// setCondition writes LocalDiskMissing like node-problem-detector: a strategic-merge patch of
// status.conditions (merged by type) through the status subresource, on change or heartbeat.
func (c *Controller) setCondition(ctx context.Context, node *corev1.Node, missing []string) {
	sort.Strings(missing)
	cond := corev1.NodeCondition{Type: contract.ConditionLocalDiskMissing, Status: corev1.ConditionFalse,
		Reason: "LocalDisksPresent", Message: "every watched local block volume has its disk"}
	if len(missing) > 0 {
		cond.Status, cond.Reason = corev1.ConditionTrue, "LocalDiskMissing"
		cond.Message = "local disks missing for PVs: " + strings.Join(missing, ", ")
	}
	key := string(cond.Status) + "|" + cond.Reason + "|" + cond.Message
	now := c.deps.Clock.Now()
	var existing *corev1.NodeCondition
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == contract.ConditionLocalDiskMissing {
			existing = &node.Status.Conditions[i]
		}
	}
	// Skip when unchanged since our own last patch within the heartbeat (the cached Node may
	// lag that patch, so it is not compared).
	if key == c.lastCondition && now.Sub(c.lastBeat) < c.opts.HeartbeatPeriod {
		return
	}
	cond.LastHeartbeatTime = metav1.NewTime(now)
	cond.LastTransitionTime = metav1.NewTime(now)
	if existing != nil && existing.Status == cond.Status {
		cond.LastTransitionTime = existing.LastTransitionTime
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if _, err := c.deps.Client.CoreV1().Nodes().PatchStatus(ctx, node.Name, patch); err != nil {
		logr.FromContextOrDiscard(ctx).Error(err, "patch node condition")
		c.metrics.Errors.WithLabelValues("api").Inc()
		return
	}
	c.lastCondition, c.lastBeat = key, now
}
