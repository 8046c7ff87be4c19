package bmc

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// powerBooter is a Booter that fails or succeeds as told and then
// leaves the BMC's power where a half-done action would.
type powerBooter struct {
	b   *stubBMC
	err error
	to  string
}

func (p powerBooter) SetBootDevice(context.Context, string, drivers.BMC, string) error { return p.err }
func (p powerBooter) SetPower(context.Context, string, drivers.BMC, string) error {
	p.b.set(p.to, nil)
	return p.err
}
func (powerBooter) NoteArgs(string, map[string]any) {}

// TestReadBack: the power state is read back into the result data after
// every power action of a polled BMC and after any failure of a power,
// boot device or out-of-band step command (a simulated BMC only after a
// failure); after a validate that worked, simulated BMC too (manage's
// verify records the BMC's power state, as Ironic's), and not once the
// command's time ran out.
func TestReadBack(t *testing.T) {
	real, sim := &stubBMC{}, &stubBMC{}
	s := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler),
		Builders: map[string]Builder{"redfish": {}, "fake": {NoPowerSync: true}}})
	s.Put("r1", "redfish", real)
	s.Put("f1", "fake", sim)
	failed := errors.New("redfish BMC http://127.0.0.1:1: did not report power On within 1m0s")
	for _, c := range []struct {
		name, node, action string
		err                error
		to, want           string
		cancelled          bool
	}{
		{"power on that worked", "r1", protocol.ActionPower, nil, protocol.PowerOn, protocol.PowerOn, false},
		{"power on that failed half way", "r1", protocol.ActionPower, failed, protocol.PowerOff, protocol.PowerOff, false},
		{"boot device that failed", "r1", protocol.ActionBootDev, failed, protocol.PowerOn, protocol.PowerOn, false},
		{"boot device that worked: nothing", "r1", protocol.ActionBootDev, nil, protocol.PowerOn, "", false},
		{"validate", "r1", protocol.ActionValidate, nil, protocol.PowerOn, protocol.PowerOn, false},
		{"simulated validate", "f1", protocol.ActionValidate, nil, protocol.PowerOff, protocol.PowerOff, false},
		{"simulated power on that worked: nothing", "f1", protocol.ActionPower, nil, protocol.PowerOn, "", false},
		{"simulated power on that failed", "f1", protocol.ActionPower, failed, protocol.PowerOff, protocol.PowerOff, false},
		{"time ran out: nothing", "r1", protocol.ActionPower, failed, protocol.PowerOff, "", true},
	} {
		b := real
		if c.node == "f1" {
			b = sim
		}
		b.set(c.to, nil)
		ctx, cancel := context.WithCancel(context.Background())
		if c.cancelled {
			cancel()
		}
		ctx, data := WithData(ctx)
		m := &protocol.Message{Node: c.node, Action: c.action, Args: map[string]any{"state": protocol.PowerOn, "device": protocol.BootDisk}}
		err := s.Exec(ctx, m, powerBooter{b: b, err: c.err, to: c.to})
		cancel()
		if (err != nil) != (c.err != nil) {
			t.Errorf("%s: err %v", c.name, err)
		}
		got, _ := data()[protocol.DataPowerState].(string)
		if got != c.want {
			t.Errorf("%s: read back %q, want %q", c.name, got, c.want)
		}
	}
}
