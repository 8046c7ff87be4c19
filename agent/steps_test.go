package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/bmc"
	"github.com/bmedge/bmedge/protocol"
)

// An oob_step command with several steps runs them in order and stops at
// the first that fails, saying how many succeeded before it.
func TestOOBStepRun(t *testing.T) {
	a := New(Config{Site: "s1", Sim: SimOptions{Nodes: 1}, Log: slog.New(slog.DiscardHandler)})
	a.ctx = context.Background()
	cmd := func(steps ...protocol.Step) *protocol.Message {
		return &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: "c1", Node: "n1", Sent: time.Now(),
			Deadline: time.Now().Add(time.Minute), Action: protocol.ActionOOBStep, Driver: "fake", Step: &steps[0], Steps: steps}
	}
	prep := protocol.Step{Interface: "deploy", Step: "prepare_instance_boot"}
	down := protocol.Step{Interface: "deploy", Step: "tear_down_agent"}
	boot := protocol.Step{Interface: "deploy", Step: "boot_instance"}
	bogus := protocol.Step{Interface: "management", Step: "no_such_step"}

	m := cmd(prep, down, boot)
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := a.execBMC(context.Background(), m); err != nil {
		t.Fatalf("the deploy's tail failed: %v", err)
	}
	b, err := a.bmcs.Get("n1", "fake", nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := b.PowerState(context.Background()); p != protocol.PowerOn {
		t.Fatalf("after boot_instance the node is %q", p)
	}

	err = a.execBMC(context.Background(), cmd(prep, down, bogus, boot))
	var se *bmc.StepsError
	if !errors.As(err, &se) || se.Done != 2 || !strings.Contains(err.Error(), "step management.no_such_step: fake BMC has no step") {
		t.Fatalf("a run failing at its third step: %v (%#v)", err, se)
	}
	if p, _ := b.PowerState(context.Background()); p != protocol.PowerOff {
		t.Fatalf("the step after the failed one ran: the node is %q", p)
	}

	// One step alone fails as before, without a count.
	err = a.execBMC(context.Background(), &protocol.Message{Kind: protocol.KindCommand, ID: "c2", Node: "n1", Action: protocol.ActionOOBStep, Driver: "fake", Step: &bogus})
	var one *bmc.StepsError
	if err == nil || errors.As(err, &one) {
		t.Fatalf("one failing step: %v, want its own error without a count", err)
	}
}
