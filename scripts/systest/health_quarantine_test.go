package systest

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers/redfish/recorded"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestHealthQuarantine: a coordinator with the quarantine policy on
// Critical (serve --quarantine-on critical) and a node on a copy of the
// recorded iLO 5 tree whose system says OK (its Fan 2 and CPU 1 are
// Critical, a power supply Warning). The node is provided (no automated
// cleaning) and available; its BMC's health turns Critical: at the
// site's next report the node is in maintenance with a reason naming the
// critical sensors and a history line, and a deploy (curl, an
// independent client) is refused for maintenance.
func TestHealthQuarantine(t *testing.T) {
	t.Parallel()
	const pw = "pa55word"
	dir := hpeTree(t, "OK", "OK", 1, imlEntry)
	s, err := recorded.Start(recorded.Options{Fixture: dir, Username: "admin", Password: pw, Quirks: recorded.Profiles["hpe-ilo5-dl325"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cl, id, apiAddr := healthRigOpts(t, s, pw, testrig.Options{NoAutomatedClean: true,
		Machine: fsm.Config{QuarantineOn: protocol.HealthCritical}}, nil)
	type nodeView struct {
		State       string  `json:"provision_state"`
		Health      *string `json:"health"`
		Maintenance bool    `json:"maintenance"`
		Reason      *string `json:"maintenance_reason"`
	}
	get := func() nodeView {
		var n nodeView
		cl.Do("GET", "/v1/nodes/"+id, nil, &n)
		return n
	}
	waitUntil(t, "health OK", 30*time.Second, func() bool { h := get().Health; return h != nil && *h == "OK" })
	cl.MustVerb(id, "provide", nil)
	if n := cl.WaitRest(id, 30*time.Second); n.State != "available" {
		t.Fatalf("provide: %q %q", n.State, n.LastError)
	}
	if n := get(); n.Maintenance {
		t.Fatalf("an OK node is in maintenance: %+v", n)
	}

	s.Edit(hpeSystem, func(d map[string]any) {
		d["Status"] = map[string]any{"Health": "Critical", "HealthRollup": "Critical", "State": "Enabled"}
	})
	waitUntil(t, "the node quarantined", 30*time.Second, func() bool { return get().Maintenance })
	n := get()
	if n.State != "available" || n.Health == nil || *n.Health != "Critical" || n.Reason == nil {
		t.Fatalf("quarantined node: %+v", n)
	}
	for _, want := range []string{"quarantined: health Critical", `fan "Fan 2" Critical (reading 0%)`, `temperature "02-CPU 1" Critical (reading 80 Cel)`} {
		if !strings.Contains(*n.Reason, want) {
			t.Errorf("maintenance_reason %q lacks %q", *n.Reason, want)
		}
	}
	if strings.Contains(*n.Reason, "HpeServerPowerSupply 2") {
		t.Errorf("maintenance_reason names the Warning power supply: %q", *n.Reason)
	}
	h := historyText(cl, id)
	if !strings.Contains(h, "Node health status changed: health='Critical' (previously 'OK')") || !strings.Contains(h, "maintenance set: quarantined: health Critical") {
		t.Errorf("history lacks the health change or the quarantine:\n%s", h)
	}
	status, body := curlDo(t, "http://"+apiAddr, "PUT", "/v1/nodes/"+id+"/states/provision",
		`{"target":"active"}`)
	if status != "400" || !strings.Contains(body, "maintenance") {
		t.Errorf("deploy of the quarantined node: %s %s; want 400 for maintenance", status, body)
	}
	if n := get(); n.State != "available" {
		t.Errorf("after the refused deploy: %q", n.State)
	}
}
