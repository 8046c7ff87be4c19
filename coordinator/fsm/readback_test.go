package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// TestResultReadBack: the power state an edge agent read back from the
// BMC after a command (protocol.DataPowerState) is the one recorded,
// whether the command succeeded or failed, and a power-sync report read
// before it changes nothing; the warnings of a result
// (protocol.DataWarnings) go into the history as WARNINGs and are
// counted, and a failed inspection's boot records the BMC's power.
func TestResultReadBack(t *testing.T) {
	t0 := time.Unix(5000, 0)
	on, off := protocol.PowerOn, protocol.PowerOff
	power := func(t *testing.T, m *Machine, n *Node, target string) *protocol.Message {
		t.Helper()
		out, r := m.PowerRequest(n, target, t0)
		if r != nil || len(out.Send) != 1 {
			t.Fatalf("power %s: %v, %d sent", target, r, len(out.Send))
		}
		return out.Send[0].Msg
	}
	result := func(cmd *protocol.Message, ok bool, errText string, data map[string]any) *protocol.Message {
		return &protocol.Message{Kind: protocol.KindResult, ID: "r-" + cmd.ID, CommandID: cmd.ID, OK: ok, Error: errText, Data: data, Sent: t0.Add(time.Second)}
	}
	rest := func() *Node {
		return &Node{UUID: "u1", Name: "n1", Driver: "redfish", Site: "s1", ProvisionState: Manageable, PowerState: on}
	}

	t.Run("failed power on records the BMC's off", func(t *testing.T) {
		m, n := testMachine(t), rest()
		n.PowerState = off
		cmd := power(t, m, n, "power on")
		m.Result(n, result(cmd, false, "redfish BMC http://127.0.0.1:1: reset the system (On): HTTP 500", map[string]any{protocol.DataPowerState: off}), t0.Add(time.Second))
		if n.PowerState != off || n.Locked() || !strings.Contains(n.LastError, "HTTP 500") {
			t.Fatalf("power %q, locked %v, last_error %q", n.PowerState, n.Locked(), n.LastError)
		}
	})
	t.Run("failed power off that switched the BMC off records off", func(t *testing.T) {
		m, n := testMachine(t), rest()
		cmd := power(t, m, n, "power off")
		m.Result(n, result(cmd, false, "did not report power Off within 1m0s", map[string]any{protocol.DataPowerState: off}), t0.Add(time.Second))
		if n.PowerState != off {
			t.Fatalf("recorded %q; want the BMC's power off", n.PowerState)
		}
		// A power-sync reading taken before the result is older news.
		old := &protocol.Message{Kind: protocol.KindPower, PowerState: on, Sent: t0.Add(500 * time.Millisecond)}
		if out := m.PowerReport(n, old, t0.Add(2*time.Second)); len(out.Send) > 0 || n.PowerState != off {
			t.Fatalf("an older power-sync reading forced %v, recorded %q", out.Send, n.PowerState)
		}
	})
	t.Run("a failure without a read-back keeps the record", func(t *testing.T) {
		m, n := testMachine(t), rest()
		cmd := power(t, m, n, "power off")
		m.Result(n, result(cmd, false, "BMC unreachable", nil), t0.Add(time.Second))
		if n.PowerState != on {
			t.Fatalf("recorded %q; want power on as before (nothing read back)", n.PowerState)
		}
	})
	t.Run("success records the read-back over the target", func(t *testing.T) {
		m, n := testMachine(t), rest()
		cmd := power(t, m, n, "power off")
		out := m.Result(n, result(cmd, true, "", map[string]any{protocol.DataPowerState: on}), t0.Add(time.Second))
		if n.PowerState != on || out.BMCWarnings != 0 {
			t.Fatalf("recorded %q (warnings %d); want what the BMC said after the command", n.PowerState, out.BMCWarnings)
		}
	})
	t.Run("warnings go to the history", func(t *testing.T) {
		m, n := testMachine(t), rest()
		cmd := power(t, m, n, "power off")
		w := "powered off, but the ramdisk's virtual media did not eject: redfish BMC http://127.0.0.1:1: HTTP 500"
		out := m.Result(n, result(cmd, true, "", map[string]any{protocol.DataPowerState: off, protocol.DataWarnings: []any{w, 7}}), t0.Add(time.Second))
		if n.PowerState != off || n.LastError != "" || out.BMCWarnings != 1 {
			t.Fatalf("power %q, last_error %q, warnings %d", n.PowerState, n.LastError, out.BMCWarnings)
		}
		found := false
		for _, h := range out.History {
			found = found || h.Severity == "WARNING" && strings.Contains(h.Event, w) && h.EventType == "power"
		}
		if !found {
			t.Fatalf("history %+v lacks the warning", out.History)
		}
	})
	t.Run("failed inspection boot records the BMC's power", func(t *testing.T) {
		m, n := testMachine(t), rest()
		n.PowerState = on
		out, r := m.Verb(n, VerbRequest{Verb: Inspect}, t0)
		if r != nil || len(out.Send) != 1 {
			t.Fatalf("inspect: %v, %d sent", r, len(out.Send))
		}
		cmd := out.Send[0].Msg
		m.Result(n, result(cmd, false, "boot the ramdisk from virtual media: HTTP 400; the node's power was not changed and its virtual media were ejected",
			map[string]any{protocol.DataPowerState: off}), t0.Add(time.Second))
		if n.ProvisionState != InspectFailed || n.PowerState != off || n.Locked() {
			t.Fatalf("state %s, power %q, locked %v; want inspect failed with the BMC's power off", n.ProvisionState, n.PowerState, n.Locked())
		}
		// The ordinary verbs take the node from there.
		if _, r := m.PowerRequest(n, "power off", t0.Add(2*time.Second)); r != nil {
			t.Fatalf("power off refused: %v", r)
		}
	})
}
