package fsm

import (
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// TestSiteReturned: a node's timeout counts only the time its site was
// reachable.
func TestSiteReturned(t *testing.T) {
	m := New(Config{WaitTimeout: 10 * time.Minute, CommandTimeout: 2 * time.Minute})
	t0 := time.Unix(100000, 0)
	min := func(k int) time.Duration { return time.Duration(k) * time.Minute }
	waiting := func(deadline time.Time) *Node {
		return &Node{UUID: "u1", Site: "s1", ProvisionState: CleanWait, Deadline: deadline,
			Op: &Operation{Verb: Provide, Phase: "clean"}}
	}
	cases := []struct {
		name            string
		node            *Node
		since, now      time.Time
		want            time.Time
		changed         bool
		pendingDeadline time.Time // want, when the node has a pending command
	}{
		// Heard 2 min into a 10 min wait, cut for 30 min: 8 min are left
		// after the return.
		{name: "outage mid-wait", node: waiting(t0.Add(min(10))), since: t0.Add(min(2)), now: t0.Add(min(32)),
			want: t0.Add(min(40)), changed: true},
		// The last heartbeat came just before the cut: a whole timeout.
		{name: "heard at the cut", node: waiting(t0.Add(min(10))), since: t0, now: t0.Add(min(60)),
			want: t0.Add(min(70)), changed: true},
		// The wait began during the outage (its deadline was set after
		// the site was last heard): a whole timeout from the return, no
		// more.
		{name: "wait set during outage", node: waiting(t0.Add(min(15))), since: t0, now: t0.Add(min(20)),
			want: t0.Add(min(30)), changed: true},
		// The deadline had passed before the site became unreachable: the
		// outage does not save it.
		{name: "already late", node: waiting(t0.Add(min(1))), since: t0.Add(min(3)), now: t0.Add(min(5)),
			want: t0.Add(min(3)), changed: true},
		// Unknown start (never seen): a whole timeout from now.
		{name: "unknown start", node: waiting(t0.Add(min(1))), now: t0.Add(min(5)),
			want: t0.Add(min(15)), changed: true},
		{name: "unknown start, later deadline kept", node: waiting(t0.Add(min(30))), now: t0.Add(min(5)),
			want: t0.Add(min(30))},
		// A clock that went backwards moves nothing.
		{name: "no outage", node: waiting(t0.Add(min(10))), since: t0.Add(min(5)), now: t0.Add(min(5)),
			want: t0.Add(min(10))},
		// Not in a WAIT state: the command timeout is the budget, and the
		// waiting command is sent again at once with its deadline moved.
		{name: "command pending", node: func() *Node {
			n := waiting(t0.Add(min(2)))
			n.ProvisionState = Cleaning
			n.Pending = &Command{ID: "c1", LastSent: t0, Msg: &protocol.Message{ID: "c1", Deadline: t0.Add(min(2))}}
			return n
		}(), since: t0.Add(min(1)), now: t0.Add(min(11)),
			want: t0.Add(min(12)), changed: true, pendingDeadline: t0.Add(min(12))},
		{name: "command pending, cap", node: func() *Node {
			n := waiting(t0.Add(min(2)))
			n.ProvisionState = Cleaning
			n.Pending = &Command{ID: "c1", LastSent: t0, Msg: &protocol.Message{ID: "c1", Deadline: t0.Add(min(2))}}
			return n
		}(), since: t0.Add(-min(10)), now: t0.Add(min(11)),
			want: t0.Add(min(13)), changed: true, pendingDeadline: t0.Add(min(13))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var old *protocol.Message
			if c.node.Pending != nil {
				old = c.node.Pending.Msg
			}
			out := m.SiteReturned(c.node, c.since, c.now)
			if !c.node.Deadline.Equal(c.want) {
				t.Errorf("deadline %v after t0, want %v", c.node.Deadline.Sub(t0), c.want.Sub(t0))
			}
			if out.Changed != c.changed {
				t.Errorf("changed %v, want %v", out.Changed, c.changed)
			}
			if len(out.Send) != 0 || len(out.History) != 0 {
				t.Errorf("sends %d, history %d: want none (Tick resends)", len(out.Send), len(out.History))
			}
			if p := c.node.Pending; p != nil {
				if !p.LastSent.IsZero() {
					t.Errorf("pending command not due at once: last sent %v", p.LastSent)
				}
				if !p.Msg.Deadline.Equal(c.pendingDeadline) {
					t.Errorf("command deadline %v after t0, want %v", p.Msg.Deadline.Sub(t0), c.pendingDeadline.Sub(t0))
				}
				if p.Msg == old || !old.Deadline.Equal(t0.Add(min(2))) {
					t.Errorf("the command's message was changed in place")
				}
			}
		})
	}
}

// TestSiteReturnedThenTick: after an outage longer than the timeout, the
// node fails only once the site has been reachable and silent for the
// rest of its timeout.
func TestSiteReturnedThenTick(t *testing.T) {
	m := New(Config{WaitTimeout: 10 * time.Minute, CommandTimeout: 2 * time.Minute})
	t0 := time.Unix(100000, 0)
	n := &Node{UUID: "u1", Site: "s1", ProvisionState: CleanWait, TargetProvisionState: Available, Deadline: t0.Add(10 * time.Minute),
		Op: &Operation{Verb: Provide, Phase: "clean"}}
	// Heard at t0+4m, unreachable until t0+34m.
	if out := m.Tick(n, t0.Add(30*time.Minute), false); out.Changed || n.ProvisionState != CleanWait {
		t.Fatalf("an unreachable site's node timed out: %s", n.ProvisionState)
	}
	m.SiteReturned(n, t0.Add(4*time.Minute), t0.Add(34*time.Minute))
	if m.Tick(n, t0.Add(39*time.Minute), true); n.ProvisionState != CleanWait {
		t.Fatalf("failed 5 reachable minutes after the return, with 6 left: %s (%s)", n.ProvisionState, n.LastError)
	}
	m.Tick(n, t0.Add(40*time.Minute+time.Second), true)
	if n.ProvisionState == CleanWait {
		t.Fatalf("still waiting after 6 reachable, silent minutes past the return")
	}
}

func TestOutageStart(t *testing.T) {
	t0 := time.Unix(100000, 0)
	for _, c := range []struct {
		heard, offline, want time.Time
	}{
		{t0.Add(-10 * time.Second), t0, t0.Add(-10 * time.Second)},
		{t0.Add(-time.Hour), t0, t0.Add(-ReachGrace)},
		{time.Time{}, t0, t0.Add(-ReachGrace)},
		{t0.Add(time.Second), t0, t0},
	} {
		if got := OutageStart(c.heard, c.offline); !got.Equal(c.want) {
			t.Errorf("OutageStart(%v, t0) = %v, want %v", c.heard.Sub(t0), got.Sub(t0), c.want.Sub(t0))
		}
	}
}
