package sidecar

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/pvrescue/pvrescue/internal/config"
	"github.com/pvrescue/pvrescue/internal/contract"
)

func TestDefaultsMatchConfig(t *testing.T) {
	c := config.Default()
	if c.Helper.MountPath != DefaultDir {
		t.Errorf("DefaultDir = %q, config helper.mountPath = %q", DefaultDir, c.Helper.MountPath)
	}
	if c.LocalBlock.FakeDeviceSizeBytes != DefaultFakeSize {
		t.Errorf("DefaultFakeSize = %d, config localBlock.fakeDeviceSizeBytes = %d", DefaultFakeSize, c.LocalBlock.FakeDeviceSizeBytes)
	}
}

func TestReportJSONSchema(t *testing.T) {
	r := Report{Version: 1, Policy: "filter", FakeSize: 512, Devices: []Device{
		{Path: "/dev/data1", Claim: "claimA", Size: 68719476736},
		{Path: "/dev/data2", Claim: "claimB", Size: 512, Fake: true},
		{Path: "/dev/data3", Claim: "claimC", Error: "no such device node"},
	}}
	got, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"version":1,"policy":"filter","fakeSize":512,"devices":[` +
		`{"path":"/dev/data1","claim":"claimA","size":68719476736,"fake":false},` +
		`{"path":"/dev/data2","claim":"claimB","size":512,"fake":true},` +
		`{"path":"/dev/data3","claim":"claimC","size":0,"fake":false,"error":"no such device node"}]}`
	if string(got) != want {
		t.Errorf("devices.json schema changed:\n got %s\nwant %s", got, want)
	}
	var back Report
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(r, back); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
}

func TestSummaryAndRefused(t *testing.T) {
	real1 := Device{Path: "/dev/data1", Claim: "a", Size: 1 << 30}
	real2 := Device{Path: "/dev/data2", Claim: "b", Size: 1 << 30}
	fake3 := Device{Path: "/dev/data3", Claim: "data3", Size: 512, Fake: true}
	fake4 := Device{Path: "/dev/data4", Claim: "d", Size: 512, Fake: true}
	gone5 := Device{Path: "/dev/data5", Claim: "e", Error: "no such device node"}
	tests := []struct {
		name        string
		policy      string
		devices     []Device
		want        string
		wantRefused bool
	}{
		{"one fake filtered", contract.PolicyFilter, []Device{real1, real2, fake3}, "1 fake device filtered: /dev/data3 (claim data3)", false},
		{"two fakes filtered", contract.PolicyFilter, []Device{fake3, real1, fake4}, "2 fake devices filtered: /dev/data3 (claim data3), /dev/data4 (claim d)", false},
		{"all real", contract.PolicyFilter, []Device{real1, real2}, "2 devices real, none fake", false},
		{"one real", contract.PolicyRequire, []Device{real1}, "1 device real, none fake", false},
		{"none", contract.PolicyFilter, nil, "no devices", false},
		{"unreadable under filter", contract.PolicyFilter, []Device{real1, gone5}, "1 device unreadable: /dev/data5 (claim e): no such device node", false},
		{"fake and unreadable", contract.PolicyFilter, []Device{fake3, gone5}, "1 fake device filtered: /dev/data3 (claim data3); 1 device unreadable: /dev/data5 (claim e): no such device node", false},
		{"require refuses fake", contract.PolicyRequire, []Device{real1, fake3}, "refused by policy require: 1 fake device: /dev/data3 (claim data3)", true},
		{"require refuses unreadable", contract.PolicyRequire, []Device{gone5}, "refused by policy require: 1 device unreadable: /dev/data5 (claim e): no such device node", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Report{Version: ReportVersion, Policy: tt.policy, FakeSize: 512, Devices: tt.devices}
			if got := r.Summary(); got != tt.want {
				t.Errorf("Summary() = %q, want %q", got, tt.want)
			}
			if got := r.Refused(); got != tt.wantRefused {
				t.Errorf("Refused() = %v, want %v", got, tt.wantRefused)
			}
		})
	}
}

func TestSummaryFitsTerminationMessage(t *testing.T) {
	var ds []Device
	for i := range 300 {
		ds = append(ds, Device{Path: "/dev/ü" + strings.Repeat("x", i%7), Claim: "claim", Size: 512, Fake: true})
	}
	got := Report{Policy: contract.PolicyFilter, FakeSize: 512, Devices: ds}.Summary()
	if len(got) > maxTerminationMessage {
		t.Fatalf("summary is %d bytes, kubelet keeps %d", len(got), maxTerminationMessage)
	}
	if !strings.HasPrefix(got, "300 fake devices filtered: ") || !strings.HasSuffix(got, "...") {
		t.Errorf("truncated summary = %q...%q", got[:40], got[len(got)-10:])
	}
	if !utf8.ValidString(got) {
		t.Errorf("truncation split a UTF-8 sequence")
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"0123456789abc", 10, "0123456..."},
		{"ab€€x", 7, "ab..."}, // "€" is 3 bytes: a cut inside it backs off to its start
		{"ab€€x", 8, "ab€..."},
	}
	for _, tt := range tests {
		if got := truncate(tt.in, tt.n); got != tt.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
