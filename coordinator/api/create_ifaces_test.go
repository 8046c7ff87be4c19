package api_test

import (
	"strings"
	"testing"
)

// TestCreateNodeInterfaces: the *_interface fields of a node create are
// honoured or refused, never accepted and dropped. raid_interface takes
// what the driver supports (the Debian baremetal CLI's --raid-interface
// at create); another interface naming anything but the driver's one
// implementation is a 400 (curl).
func TestCreateNodeInterfaces(t *testing.T) {
	requireTool(t, baremetalPath, "python3-ironicclient")
	r := newVersionRig(t)
	base := r.api.Base
	bm := newBMCLI(t, base)
	const ver = "1.31"

	res, _ := bm.ok("--os-baremetal-api-version", ver, "node", "create", "--driver", "redfish", "--name", "hw", "--conductor-group", "site1",
		"--driver-info", "redfish_address=http://127.0.0.1:9", "--raid-interface", "redfish", "-f", "value", "-c", "raid_interface")
	if got := strings.TrimSpace(res.stdout); got != "redfish" {
		t.Fatalf("node create --raid-interface redfish shows raid_interface %q", got)
	}
	if a := vcurl(t, base, ver, "GET", "/v1/nodes/hw?fields=raid_interface", ""); a.status != 200 || !strings.Contains(a.body, `"raid_interface":"redfish"`) {
		t.Fatalf("GET hw: %d %.200s", a.status, a.body)
	}
	bad := bm.run("--os-baremetal-api-version", ver, "node", "create", "--driver", "fake", "--name", "soft", "--conductor-group", "site1", "--raid-interface", "redfish")
	if bad.code == 0 || !strings.Contains(bad.stderr, "raid interface implementation 'redfish' is not supported by hardware type fake") {
		t.Errorf("fake node create --raid-interface redfish: exit %d, %s; want the 400", bad.code, bad.stderr)
	}
	for _, c := range []struct{ body, want string }{
		{`{"driver":"fake","conductor_group":"site1","deploy_interface":"ramdisk"}`, `deploy interface implementation`},
		{`{"driver":"fake","conductor_group":"site1","rescue_interface":"no-rescue"}`, `rescue interface implementation`},
		{`{"driver":"fake","conductor_group":"site1","boot_interface":7}`, `boot_interface: it must be a string`},
	} {
		a := vcurl(t, base, "1.38", "POST", "/v1/nodes", c.body)
		if msg := faultstring(t, a.obj(t)); a.status != 400 || !strings.Contains(msg, c.want) || (!strings.Contains(c.body, ":7") && !strings.Contains(msg, "is not supported by hardware type fake")) {
			t.Errorf("POST %s: %d %.300s; want 400 with %s", c.body, a.status, a.body, c.want)
		}
	}
	// The driver's own implementations are fine to name.
	if a := vcurl(t, base, "1.38", "POST", "/v1/nodes", `{"driver":"fake","conductor_group":"site1","name":"named","deploy_interface":"direct","rescue_interface":"agent","raid_interface":"no-raid"}`); a.status != 201 || !strings.Contains(a.body, `"raid_interface":"no-raid"`) {
		t.Errorf("create naming the driver's own interfaces: %d %.300s", a.status, a.body)
	}
	// raid_interface is a 1.31 field.
	if a := vcurl(t, base, "1.30", "POST", "/v1/nodes", `{"driver":"fake","conductor_group":"site1","raid_interface":"agent"}`); a.status != 406 {
		t.Errorf("raid_interface at 1.30: %d %.200s; want 406", a.status, a.body)
	}
}
