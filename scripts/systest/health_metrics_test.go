package systest

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/recorded"
)

// TestHealthMetrics: the recorded iLO 5 tree (a copy, as in
// TestHealthRedfish) with a Critical system, a failed fan, a CPU past its
// critical threshold and a power supply in Warning: the coordinator's
// /metrics carries the node's health (2), its sensors by kind and status,
// the readings of the sensors in Warning or Critical only, and the site's
// health census; promtool accepts the output. The BMC back to OK makes
// the node's health 0.
func TestHealthMetrics(t *testing.T) {
	t.Parallel()
	const pw = "pa55word"
	dir := hpeTree(t, "Critical", "Critical", 3, imlEntry)
	s, err := recorded.Start(recorded.Options{Fixture: dir, Username: "admin", Password: pw, Quirks: recorded.Profiles["hpe-ilo5-dl325"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	_, id, apiAddr := healthRig(t, s, pw)
	url := "http://" + apiAddr + "/metrics"
	var text string
	waitUntil(t, "bmedge_node_health 2", 30*time.Second, func() bool {
		_, text = scrape(t, url, "", "")
		return sample(text, `bmedge_node_health{name="ilo1",node="`+id+`",site="rack1"}`) == 2 &&
			strings.Contains(text, "bmedge_node_sensors{")
	})
	for s, want := range map[string]float64{
		`bmedge_nodes_health{health="Critical",site="rack1"}`:                                                                                       1,
		`bmedge_node_sensors{kind="fan",node="` + id + `",site="rack1",status="Critical"}`:                                                          1,
		`bmedge_node_sensors{kind="fan",node="` + id + `",site="rack1",status="OK"}`:                                                                1,
		`bmedge_node_sensors{kind="fan",node="` + id + `",site="rack1",status="unknown"}`:                                                           1,
		`bmedge_node_sensors{kind="temperature",node="` + id + `",site="rack1",status="Critical"}`:                                                  1,
		`bmedge_node_sensors{kind="power_supply",node="` + id + `",site="rack1",status="Warning"}`:                                                  1,
		`bmedge_node_sensor_reading{kind="temperature",node="` + id + `",sensor="02-CPU 1",site="rack1",status="Critical",units="Cel"}`:             80,
		`bmedge_node_sensor_reading{kind="fan",node="` + id + `",sensor="Fan 2",site="rack1",status="Critical",units="%"}`:                          0,
		`bmedge_node_sensor_reading{kind="power_supply",node="` + id + `",sensor="HpeServerPowerSupply 2",site="rack1",status="Warning",units="W"}`: 0,
	} {
		if v := sample(text, s); v != want {
			t.Errorf("coordinator /metrics: %s is %v, want %v", s, v, want)
		}
	}
	if strings.Contains(text, `sensor="Fan 1"`) || strings.Contains(text, `sensor="01-Inlet Ambient"`) {
		t.Errorf("coordinator /metrics has a reading series of a sensor in OK")
	}
	// Only the per-node health series name a node.
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, id) && !strings.HasPrefix(l, "bmedge_node_") {
			t.Errorf("a series other than the node's health names it: %s", l)
		}
	}
	promtool(t, "coordinator", text)

	s.Edit(hpeSystem, func(d map[string]any) {
		d["Status"] = map[string]any{"Health": "OK", "HealthRollup": "OK", "State": "Enabled"}
	})
	waitUntil(t, "bmedge_node_health 0", 30*time.Second, func() bool {
		_, text = scrape(t, url, "", "")
		return sample(text, `bmedge_node_health{name="ilo1",node="`+id+`",site="rack1"}`) == 0
	})
}
