package console

import (
	"strings"
	"testing"
)

// TestSSHConsoleOf: the SSH console's address comes from redfish_address
// and redfish_console_port; without the BMC's host key, or with a key or
// vendor that is not one, nothing is dialled and the error says what to
// set.
func TestSSHConsoleOf(t *testing.T) {
	const key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	base := func(extra map[string]any) Target {
		info := map[string]any{"redfish_address": "https://10.1.2.3:8443", "redfish_console_host_key": key}
		for k, v := range extra {
			info[k] = v
		}
		return TargetOf("n1", "redfish", info)
	}
	addr, _, vendor, err := sshConsoleOf(base(nil))
	if err != nil || addr != "10.1.2.3:22" || vendor.Command != "console com2" {
		t.Fatalf("default: %q %q %v", addr, vendor.Command, err)
	}
	addr, _, vendor, err = sshConsoleOf(base(map[string]any{"redfish_console_port": 2222, "redfish_console_vendor": "ilo"}))
	if err != nil || addr != "10.1.2.3:2222" || vendor.Command != "vsp" {
		t.Fatalf("port and vendor: %q %q %v", addr, vendor.Command, err)
	}
	for _, tc := range []struct {
		extra map[string]any
		want  string
	}{
		{map[string]any{"redfish_console_host_key": ""}, "redfish_console_host_key is not set"},
		{map[string]any{"redfish_console_host_key": "not a key"}, "not an SSH public key"},
		{map[string]any{"redfish_console_port": 70000}, "redfish_console_port"},
		{map[string]any{"redfish_console_vendor": "hp"}, "idrac (console com2, the default) or ilo"},
		{map[string]any{"redfish_address": "::"}, "has no host"},
	} {
		if _, _, _, err := sshConsoleOf(base(tc.extra)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.extra, err, tc.want)
		}
	}
	if _, err := (SOLDialer{}).Dial(t.Context(), TargetOf("n1", "ipmi", map[string]any{})); err == nil || !strings.Contains(err.Error(), "ipmi_address") {
		t.Errorf("SOL without ipmi_address: %v", err)
	}
}
