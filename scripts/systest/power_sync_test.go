package systest

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestPowerSyncIPMI: power-state sync with a real edge agent polling an
// ipmi node behind ipmi_sim every 300 ms.
//   - A quiet site sends no power report: an independent MQTT observer
//     on the site's bmc/evt topic counts none over ten intervals.
//   - Powered on behind the coordinator's back (ipmitool), the node is
//     forced back off (ipmitool confirms) with a history line, and the
//     observer saw the report (the positive control of the count).
//   - A BMC that stops answering puts the node into maintenance with
//     fault "power failure"; when it answers again, maintenance is
//     cleared by itself.
func TestPowerSyncIPMI(t *testing.T) {
	sub := requireTool(t, "mosquitto_sub")
	const interval = 300 * time.Millisecond
	sim := ipmisim.StartTest(t, ipmisim.Options{})
	c := testrig.Coordinator(t, testrig.Options{Machine: fsm.Config{ForcePowerStateDuringSync: true}})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	a := testrig.StartAgentConfig(t, creds, agent.Config{PowerSyncInterval: interval})
	reads := func() float64 {
		rec := httptest.NewRecorder()
		a.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return max(0, sample(rec.Body.String(), `bmedge_agent_power_sync_reads_total{outcome="ok"}`))
	}

	var n testrig.Node
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "srv1", "driver": "ipmi", "conductor_group": "rack1", "driver_info": sim.DriverInfo()}, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage: %q, last_error %q", got.State, got.LastError)
	}
	if code := cl.Do("PUT", "/v1/nodes/"+n.UUID+"/states/power", map[string]string{"target": "power off"}, nil); code != 202 {
		t.Fatalf("power off: %d", code)
	}
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.PowerState != "power off" || got.LastError != "" {
		t.Fatalf("power off: power_state %q, last_error %q", got.PowerState, got.LastError)
	}
	offReads := reads()
	history := func() string {
		var h struct {
			History []map[string]any `json:"history"`
		}
		cl.Do("GET", "/v1/nodes/"+n.UUID+"/history", nil, &h)
		var b strings.Builder
		for _, e := range h.History {
			fmt.Fprintf(&b, "%v\n", e["event"])
		}
		return b.String()
	}
	waitFor := func(what string, timeout time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %s; node %+v\nhistory:\n%s", what, timeout, cl.Get(n.UUID), history())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The first reading has been reported once the agent polled after the
	// power off (the node was powered off by the coordinator: nothing to
	// force, so it stays at rest): two polls since, the first reported.
	waitFor("two power-sync reads after the power off", 30*time.Second, func() bool { return reads() >= offReads+2 })

	// observe subscribes to the site's bmc/evt topic as an independent
	// client (the site's credentials, an observer's client ID) for d and
	// returns the power reports it saw.
	host, port := splitAddr(c.BrokerURL)
	observe := func(d time.Duration) (chan int, func()) {
		ctx, cancel := context.WithTimeout(context.Background(), d+10*time.Second)
		cmd := exec.CommandContext(ctx, sub, "-V", "mqttv5", "-h", host, "-p", port, "-u", creds.Username, "-P", creds.Password,
			"-i", "edge-rack1.observer", "-t", "bm/v1/site/rack1/bmc/evt", "-W", fmt.Sprint(int(d.Seconds())), "-F", "%x")
		count := make(chan int, 1)
		go func() {
			out, err := cmd.CombinedOutput()
			if strings.Contains(strings.ToLower(string(out)), "not authori") {
				t.Errorf("observer refused: %v %s", err, out)
			}
			// One payload per line, in hex: the agent's bundles, unpacked.
			n := 0
			for _, line := range strings.Fields(string(out)) {
				b, err := hex.DecodeString(line)
				if err != nil {
					continue
				}
				for _, m := range siteMessages(t, "rack1", b) {
					if m.Kind == protocol.KindPower {
						n++
					}
				}
			}
			count <- n
		}()
		return count, cancel
	}
	quiet, cancel := observe(3 * time.Second)
	defer cancel()
	if got := <-quiet; got != 0 {
		t.Errorf("a quiet site sent %d power reports in 3 s (10 intervals); want 0", got)
	}

	// Behind the coordinator's back.
	seen, cancel2 := observe(4 * time.Second)
	defer cancel2()
	if !waitfor.Until(10*time.Second, func() bool { return c.Broker.Subscribed("edge-rack1.observer", "bm/v1/site/rack1/bmc/evt") }) {
		t.Fatal("the observer did not subscribe within 10 s")
	}
	if out, err := sim.Ipmitool("chassis", "power", "on"); err != nil {
		t.Fatal(out, err)
	}
	const forced = "power state changed behind the coordinator's back: BMC reports power on, recorded power off; forcing power off"
	waitFor("forced back off", 30*time.Second, func() bool { return strings.Contains(history(), forced) })
	waitFor("the BMC is off again", 30*time.Second, func() bool {
		out, err := sim.Ipmitool("chassis", "power", "status")
		return err == nil && strings.Contains(out, "Chassis Power is off")
	})
	if got := cl.WaitRest(n.UUID, 30*time.Second); got.PowerState != "power off" || got.Maintenance || got.LastError != "" {
		t.Fatalf("after forcing: power_state %q, maintenance %v, last_error %q", got.PowerState, got.Maintenance, got.LastError)
	}
	if got := <-seen; got < 1 {
		t.Errorf("the observer saw %d power reports while the node was powered on behind the coordinator's back; want at least 1", got)
	}

	// The BMC stops answering, then comes back.
	sim.Kill()
	var fault string
	waitFor("maintenance after three failed readings", 60*time.Second, func() bool {
		var raw map[string]any
		cl.Do("GET", "/v1/nodes/"+n.UUID, nil, &raw)
		fault, _ = raw["fault"].(string)
		return raw["maintenance"] == true
	})
	if fault != "power failure" {
		t.Fatalf("maintenance with fault %q; want \"power failure\"", fault)
	}
	if h := history(); !strings.Contains(h, "could not be read 3 times in a row") {
		t.Errorf("history lacks the maintenance line:\n%s", h)
	}
	if err := sim.Revive(); err != nil {
		t.Fatal(err)
	}
	waitFor("maintenance cleared when the BMC answers", 60*time.Second, func() bool { return !cl.Get(n.UUID).Maintenance })
	if h := history(); !strings.Contains(h, "maintenance unset: the BMC answers again") {
		t.Errorf("history lacks the line clearing maintenance:\n%s", h)
	}
	if got := cl.Get(n.UUID); got.PowerState != "power off" || got.LastError != "" {
		t.Errorf("after the BMC came back: power_state %q, last_error %q", got.PowerState, got.LastError)
	}
}
