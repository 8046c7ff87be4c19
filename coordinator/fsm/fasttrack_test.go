package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// fastWorld is newWorld with fast track on or off.
func fastWorld(t *testing.T, on bool) *world {
	w := newWorld(t)
	cfg := w.m.Config()
	cfg.FastTrack = on
	w.m = New(cfg)
	return w
}

func (w *world) count(entry string) int {
	k := 0
	for _, l := range w.log {
		if l == entry {
			k++
		}
	}
	return k
}

// inbandTokens are the agent tokens of the in-band commands sent so far.
func (w *world) inbandTokens() []string {
	var out []string
	for _, o := range w.sent {
		if o.Msg.Action == protocol.ActionInbandRun {
			out = append(out, o.Msg.Token)
		}
	}
	return out
}

// TestFastTrackInspectProvideDeploy: with fast track, inspect → provide →
// deploy boots the ramdisk once (one reboot, no power-off between the
// operations) and every in-band step of the three runs with the one
// boot's agent token and credential nonce; without it, three reboots and
// a power-off after inspect and after provide, each boot with its own.
func TestFastTrackInspectProvideDeploy(t *testing.T) {
	for _, on := range []bool{false, true} {
		w := fastWorld(t, on)
		w.verb(Manage, VerbRequest{})
		w.verb(Inspect, VerbRequest{})
		w.want(Manageable)
		nonce, token := w.n.BootNonce, w.n.AgentToken
		if on {
			if w.n.PowerState != protocol.PowerOn || token == "" || nonce == "" || !w.n.FastTrackUntil.Equal(w.now.Add(DefaultFastTrackTimeout)) {
				t.Fatalf("fast track: after inspect power %q token %q nonce %q until %v (now %v); want on, the boot kept for 300s",
					w.n.PowerState, token, nonce, w.n.FastTrackUntil, w.now)
			}
		} else if w.n.PowerState != protocol.PowerOff || token != "" || nonce != "" || !w.n.FastTrackUntil.IsZero() {
			t.Fatalf("no fast track: after inspect power %q token %q nonce %q; want off, the boot ended", w.n.PowerState, token, nonce)
		}
		w.verb(Provide, VerbRequest{})
		w.want(Available)
		if on && (w.n.BootNonce != nonce || w.n.AgentToken != token) {
			t.Fatalf("fast track: provide changed the boot's credential: nonce %q → %q, token %q → %q", nonce, w.n.BootNonce, token, w.n.AgentToken)
		}
		w.n.InstanceInfo = map[string]any{"image_source": "http://x/img"}
		w.verb(Deploy, VerbRequest{})
		w.want(Active)
		reboots, offs := w.count("power "+protocol.PowerReboot), w.count("power "+protocol.PowerOff)
		wantReboots, wantOffs := 3, 2
		if on {
			wantReboots, wantOffs = 1, 0
		}
		if reboots != wantReboots || offs != wantOffs || w.boots != wantReboots {
			t.Fatalf("fast track %v: %d reboots, %d power-offs, %d ramdisk boots; want %d, %d, %d: %v", on, reboots, offs, w.boots, wantReboots, wantOffs, wantReboots, w.log)
		}
		toks := w.inbandTokens()
		distinct := map[string]bool{}
		for _, tk := range toks {
			distinct[tk] = true
		}
		if len(toks) < 4 || (on && len(distinct) != 1) || (!on && len(distinct) != 3) {
			t.Fatalf("fast track %v: in-band commands ran with tokens %v; want one per boot", on, toks)
		}
		if w.n.AgentToken != "" || w.n.BootNonce != "" || !w.n.FastTrackUntil.IsZero() {
			t.Fatalf("fast track %v: after deploy the ramdisk boot is still known: token %q nonce %q until %v", on, w.n.AgentToken, w.n.BootNonce, w.n.FastTrackUntil)
		}
	}
}

// TestFastTrackable: the decision, with the clock passed in: within the
// window with a fresh heartbeat yes; a heartbeat older than the timeout,
// the window's end, maintenance, a last_error, power off, fast track off
// (or off by driver_info) no; driver_info/fast_track on overrides the
// coordinator's off; a bad value is refused by the verbs.
func TestFastTrackable(t *testing.T) {
	w := fastWorld(t, true)
	w.verb(Manage, VerbRequest{})
	w.verb(Inspect, VerbRequest{})
	end, beat := w.n.FastTrackUntil, w.n.LastHeartbeat
	base := *w.n
	cases := []struct {
		name string
		now  time.Time
		set  func(n *Node)
		want bool
		why  string
	}{
		{"fresh", beat.Add(time.Minute), nil, true, ""},
		{"heartbeat at the timeout", beat.Add(DefaultFastTrackTimeout), func(n *Node) { n.FastTrackUntil = beat.Add(time.Hour) }, true, ""},
		{"heartbeat older than the timeout", beat.Add(DefaultFastTrackTimeout + time.Second), func(n *Node) { n.FastTrackUntil = beat.Add(time.Hour) }, false, "heartbeated"},
		{"heartbeats go on past the window", end.Add(time.Second), func(n *Node) { n.LastHeartbeat = end }, false, "window ended"},
		{"maintenance", beat.Add(time.Minute), func(n *Node) { n.Maintenance = true }, false, "maintenance"},
		{"last_error", beat.Add(time.Minute), func(n *Node) { n.LastError = "boom" }, false, "last_error"},
		{"powered off", beat.Add(time.Minute), func(n *Node) { n.PowerState = protocol.PowerOff }, false, "heartbeated"},
		{"driver_info off", beat.Add(time.Minute), func(n *Node) { n.DriverInfo = map[string]any{"fast_track": "false"} }, false, "off"},
		{"no ramdisk kept", beat.Add(time.Minute), func(n *Node) { n.FastTrackUntil = time.Time{} }, false, "no ramdisk"},
	}
	for _, c := range cases {
		n := base
		if c.set != nil {
			c.set(&n)
		}
		ok, why := w.m.FastTrackable(&n, c.now)
		if ok != c.want || !strings.Contains(why, c.why) {
			t.Errorf("%s: FastTrackable = %v %q, want %v %q", c.name, ok, why, c.want, c.why)
		}
	}

	// The coordinator's off, the node's driver_info on.
	off := fastWorld(t, false)
	off.n.DriverInfo = map[string]any{"fast_track": true}
	off.verb(Manage, VerbRequest{})
	off.verb(Inspect, VerbRequest{})
	if off.n.FastTrackUntil.IsZero() || off.n.PowerState != protocol.PowerOn {
		t.Fatalf("driver_info/fast_track true did not keep the ramdisk: %v", off.log)
	}
	off.n.DriverInfo["fast_track"] = "sometimes"
	if _, r := off.m.Verb(off.n, VerbRequest{Verb: Provide}, off.now); r == nil || r.Reason != Invalid || !strings.Contains(r.Msg, "fast_track") {
		t.Fatalf("provide with driver_info/fast_track=sometimes: %v, want refused naming fast_track", r)
	}
}

// TestFastTrackTimeout: a kept ramdisk that no operation uses is powered
// off at the end of the fast track timeout (not before, not while the
// site is offline or the node in maintenance), and the operation after
// that boots a new ramdisk with a new credential.
func TestFastTrackTimeout(t *testing.T) {
	w := fastWorld(t, true)
	w.verb(Manage, VerbRequest{})
	w.verb(Inspect, VerbRequest{})
	end, nonce := w.n.FastTrackUntil, w.n.BootNonce
	if out := w.m.Tick(w.n, end, true); len(out.Send) != 0 || w.n.Op != nil {
		t.Fatalf("tick at the end of the window sent %v", out.Send)
	}
	if out := w.m.Tick(w.n, end.Add(time.Second), false); len(out.Send) != 0 {
		t.Fatalf("tick with the site offline sent %v", out.Send)
	}
	w.n.Maintenance = true
	if out := w.m.Tick(w.n, end.Add(time.Second), true); len(out.Send) != 0 {
		t.Fatalf("tick in maintenance sent %v", out.Send)
	}
	w.n.Maintenance = false
	w.log = nil
	w.now = end.Add(time.Second)
	w.run(w.m.Tick(w.n, w.now, true))
	if got := strings.Join(w.log, ","); got != "power power off" || w.n.PowerState != protocol.PowerOff ||
		w.n.AgentToken != "" || w.n.BootNonce != "" || !w.n.FastTrackUntil.IsZero() || w.n.Op != nil {
		t.Fatalf("after the timeout: log %s power %q token %q nonce %q until %v", got, w.n.PowerState, w.n.AgentToken, w.n.BootNonce, w.n.FastTrackUntil)
	}
	w.log = nil
	w.verb(Provide, VerbRequest{})
	w.want(Available)
	if w.count("power "+protocol.PowerReboot) != 1 || w.n.BootNonce == "" || w.n.BootNonce == nonce {
		t.Fatalf("provide after the timeout: %v, nonce %q (inspect's %q); want a reboot with a new credential", w.log, w.n.BootNonce, nonce)
	}
}

// TestFastTrackStaleHeartbeat: a kept ramdisk that stopped heartbeating
// is not used: the next operation reboots into a new boot with a new
// credential.
func TestFastTrackStaleHeartbeat(t *testing.T) {
	w := fastWorld(t, true)
	w.verb(Manage, VerbRequest{})
	w.verb(Inspect, VerbRequest{})
	nonce := w.n.BootNonce
	w.n.FastTrackUntil = w.now.Add(time.Hour)
	w.now = w.n.LastHeartbeat.Add(DefaultFastTrackTimeout + time.Second)
	w.log = nil
	w.verb(Provide, VerbRequest{})
	w.want(Available)
	if w.count("power "+protocol.PowerReboot) != 1 || w.n.BootNonce == nonce {
		t.Fatalf("provide with a stale heartbeat: %v, nonce %q (old %q); want a reboot with a new credential", w.log, w.n.BootNonce, nonce)
	}
}

// TestFastTrackPoweredOffBehindTheBack: a node kept in its ramdisk that
// power-state sync finds off has lost its boot: recorded off, the boot's
// credential ended at the site, and it is not powered back on into a
// ramdisk that no operation waits for.
func TestFastTrackPoweredOffBehindTheBack(t *testing.T) {
	w := fastWorld(t, true)
	w.m = New(func() Config { c := w.m.Config(); c.ForcePowerStateDuringSync = true; return c }())
	w.verb(Manage, VerbRequest{})
	w.verb(Inspect, VerbRequest{})
	out := w.m.PowerReport(w.n, &protocol.Message{Sent: w.now, PowerState: protocol.PowerOff}, w.now)
	if w.n.PowerState != protocol.PowerOff || w.n.Op != nil || w.n.AgentToken != "" || !w.n.FastTrackUntil.IsZero() ||
		len(out.Send) != 1 || out.Send[0].Msg.Action != protocol.ActionEndBoot {
		t.Fatalf("power report off on a kept ramdisk: power %q op %v token %q until %v sent %v", w.n.PowerState, w.n.Op, w.n.AgentToken, w.n.FastTrackUntil, out.Send)
	}
}
