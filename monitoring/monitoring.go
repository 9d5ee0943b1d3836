// Package monitoring holds pvrescue's Prometheus alert rules (pvrescue.rules.yaml, with promtool
// unit tests in pvrescue.rules_test.yaml) and its Grafana dashboard (dashboard.json), and the list
// of metric names they may use. The Helm chart ships copies of both files (charts/pvrescue/files).
package monitoring

import (
	"embed"
	"strings"
)

// Files of this directory.
const (
	RulesFile     = "pvrescue.rules.yaml"
	RulesTestFile = "pvrescue.rules_test.yaml"
	DashboardFile = "dashboard.json"
)

// FS holds the rule file, its promtool tests and the dashboard.
//
//go:embed pvrescue.rules.yaml pvrescue.rules_test.yaml dashboard.json
var FS embed.FS

// KnownMetrics are the metric names alerts and dashboards may select, with their type: pvrescue's
// own (agreed in this round's METRICS.md) and the few of Prometheus and kube-apiserver used here.
var KnownMetrics = map[string]string{
	// webhook
	"pvrescue_webhook_admissions_total":           "counter",
	"pvrescue_webhook_admission_duration_seconds": "histogram",
	// localdisk
	"pvrescue_localdisk_fake_devices_active":                   "gauge",
	"pvrescue_localdisk_fake_device_active":                    "gauge",
	"pvrescue_localdisk_fake_device_created_timestamp_seconds": "gauge",
	"pvrescue_localdisk_disk_missing":                          "gauge",
	"pvrescue_localdisk_disk_missing_since_timestamp_seconds":  "gauge",
	"pvrescue_localdisk_errors_total":                          "counter",
	// s3mount
	"pvrescue_s3_mount_healthy":           "gauge",
	"pvrescue_s3_restores_total":          "counter",
	"pvrescue_s3_bridges_active":          "gauge",
	"pvrescue_s3_time_to_restore_seconds": "histogram",
	// containermount
	"pvrescue_container_remounts_total":           "counter",
	"pvrescue_container_remount_duration_seconds": "histogram",
	// others
	"up": "gauge",
	"apiserver_admission_webhook_fail_open_count": "counter",
}

// Known reports whether name is a known metric or a series of a known histogram.
func Known(name string) bool {
	if _, ok := KnownMetrics[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && KnownMetrics[base] == "histogram" {
			return true
		}
	}
	return false
}
