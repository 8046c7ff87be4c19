package redfish_test

import (
	"strings"
	"testing"

	"github.com/bmedge/bmedge/drivers/redfish/recorded"
)

// TestHTTPBootRecorded: UEFI HTTP boot (redfish-https) against recorded
// vendors' trees. Intel's S2600BP offers no UefiHttp target and iLO 5's
// recording has UefiHttp but no HttpBootUri: both are refused before
// anything is written, saying to use redfish-virtual-media. sushy's
// samples offer both: the override is set (UefiHttp, once, UEFI, the
// URL) and the clean up clears HttpBootUri; no virtual media is touched.
func TestHTTPBootRecorded(t *testing.T) {
	c := ctx(t)
	for _, tc := range []struct{ fixture, why string }{
		{"intel-s2600bp", "does not offer the boot source override target UefiHttp"},
		{"hpe-ilo5-dl325", "has no Boot/HttpBootUri property"},
	} {
		s := startRecorded(t, tc.fixture, recorded.Profiles[tc.fixture], 0)
		d := recordedDriver(t, s, &syncBuffer{})
		err := d.BootFromHTTP(c, "http://127.0.0.1:9/boot/x/boot.iso")
		mustContain(t, err, tc.why, "redfish-virtual-media", systemPath(t, s))
		if n := count(s.Requests(), "PATCH "); n != 0 {
			t.Errorf("%s: %d PATCHes after the refusal; want none", tc.fixture, n)
		}
		if err := d.ClearHTTPBoot(c); err != nil {
			t.Errorf("%s: clean up of a system without HttpBootUri: %v", tc.fixture, err)
		}
	}

	s := startRecorded(t, "sushy-samples", recorded.Profiles["sushy-samples"], 0)
	d := recordedDriver(t, s, &syncBuffer{})
	const u = "http://127.0.0.1:9/boot/0123/boot.iso"
	if err := d.BootFromHTTP(c, u); err != nil {
		t.Fatal(err)
	}
	boot, _ := s.Doc(systemPath(t, s))["Boot"].(map[string]any)
	if boot["BootSourceOverrideTarget"] != "UefiHttp" || boot["HttpBootUri"] != u || boot["BootSourceOverrideEnabled"] != "Once" || boot["BootSourceOverrideMode"] != "UEFI" {
		t.Fatalf("the BMC's Boot after BootFromHTTP: %v", boot)
	}
	if err := d.ClearHTTPBoot(c); err != nil {
		t.Fatal(err)
	}
	boot, _ = s.Doc(systemPath(t, s))["Boot"].(map[string]any)
	if v, has := boot["HttpBootUri"]; !has || v != nil {
		t.Fatalf("HttpBootUri after the clean up: %v (present %v); want null", v, has)
	}
	for _, r := range s.Requests() {
		if !strings.HasPrefix(r, "GET ") && strings.Contains(r, "VirtualMedia") {
			t.Errorf("UEFI HTTP boot touched virtual media: %s", r)
		}
	}
}
