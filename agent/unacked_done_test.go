package agent

import (
	"context"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// TestUnackedResultAnswersDuplicateAfterLongOutage checks that a BMC
// command whose result the coordinator has not acknowledged for hours (a
// WAN outage) is not run again when the coordinator resends it once the
// site is back: the result is still in the outbox, so its done-record
// must be kept and answer the duplicate.
func TestUnackedResultAnswersDuplicateAfterLongOutage(t *testing.T) {
	a := storedAgent(t, "", 0, nil)
	defer a.closeStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.ctx = ctx
	bmc := &recordingBMC{}
	a.bmcs.Put("n1", "test", bmc)
	// Its deadline was moved by the coordinator for the outage: ahead.
	cmd := &protocol.Message{Kind: protocol.KindCommand, ID: "c1", Node: "n1", Driver: "test", Action: protocol.ActionPower,
		Args: map[string]any{"state": protocol.PowerReboot}, Deadline: time.Now().Add(3 * time.Hour)}
	a.runBMC(cmd)
	if n := a.Outbox(); n != 1 {
		t.Fatalf("outbox after the command: %d, want its result", n)
	}
	a.ob.Trim(time.Now().Add(48 * time.Hour)) // the resend loop, two days into the outage
	_, kept := a.hasDone("c1")
	if !kept {
		t.Error("the done-record of an unacknowledged result was dropped")
	}
	a.runBMC(cmd) // the coordinator's resend once the site is back
	if ops := bmc.ops.Load(); ops != 1 {
		t.Errorf("the duplicate command ran on the BMC again: %d operations, want 1", ops)
	}
	if n := a.Outbox(); n != 1 {
		t.Errorf("outbox after the duplicate: %d results, want the one", n)
	}
}
