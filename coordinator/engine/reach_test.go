package engine

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// testClock is a settable clock for the engine; its timers are real.
type testClock struct {
	clock.Real
	ns atomic.Int64
}

func (c *testClock) Now() time.Time      { return time.Unix(0, c.ns.Load()) }
func (c *testClock) now() time.Time      { return c.Now() }
func (c *testClock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *testClock) add(d time.Duration) { c.ns.Add(int64(d)) }
func presenceMsg(site string, on bool) []byte {
	return mustJSON(&protocol.Message{Kind: protocol.KindPresence, Site: site, Online: on})
}

func openEngine(t *testing.T, dir string, clk *testClock) *Engine {
	t.Helper()
	cfg := Config{DataDir: dir, Clock: clk, TickInterval: 20 * time.Millisecond, Log: quietLog(t)}
	cfg.Machine.AutomatedClean = true
	cfg.Machine.WaitTimeout = 10 * time.Minute
	cfg.Machine.CommandTimeout = 2 * time.Minute
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(&recorder{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

// settle waits until everything queued for the loop so far has run.
// tickNow runs one clock tick at the clock's time now and waits for its
// commit (the ticker's own ticks come at real intervals).
func tickNow(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.tick(true); err != nil {
		t.Fatal(err)
	}
}

// drain waits until the loop has run and committed every request
// submitted before it (Settle).
func drain(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.Settle(); err != nil {
		t.Fatal(err)
	}
}

func settle(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.do(func(*tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

func siteInfo(t *testing.T, e *Engine, name string) SiteInfo {
	t.Helper()
	for _, s := range e.Sites() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("site %s not listed", name)
	return SiteInfo{}
}

func same(p *time.Time, want time.Time) bool { return p != nil && p.Equal(want) }

// TestSiteReachability: a site's outage is recorded (last heard, offline
// since, its agent's queue), survives a coordinator restart, during
// which the site counts as unreachable since it was last seen, and a
// node waiting at the site neither times out during the outage nor gets
// more than the reachable part of its timeout counted once the site is
// back.
func TestSiteReachability(t *testing.T) {
	dir := t.TempDir()
	clk := &testClock{}
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	clk.set(t0)
	e := openEngine(t, dir, clk)
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	if s := siteInfo(t, e, "s1"); s.Online || s.LastSeen != nil || s.OfflineSince != nil {
		t.Fatalf("a site never seen: %+v", s)
	}
	e.HandleMessage(protocol.SitePresenceTopic("s1"), presenceMsg("s1", true))
	n, err := e.CreateNode(NodeSpec{Name: "n1", Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	id := n.UUID
	// The node waits in clean wait for its ramdisk; its deadline was set
	// at t0 (a heartbeat then).
	err = e.do(func(t *tx) error {
		n := e.reg.nodes[id]
		n.ProvisionState, n.TargetProvisionState = fsm.CleanWait, fsm.Available
		n.Op = &fsm.Operation{Verb: fsm.Provide, Target: fsm.Available, Phase: "clean", StartedAt: t.now}
		n.Reservation = "coordinator"
		n.Deadline = t.now.Add(10 * time.Minute)
		n.LastHeartbeat = t.now
		t.dirty[id] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// A heartbeat summary at t0+30s: 3 results wait at the site.
	clk.add(30 * time.Second)
	e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindBeats, ID: "sum1", Site: "s1", Queued: 3}))
	settle(t, e)
	if s := siteInfo(t, e, "s1"); !s.Online || !same(s.LastSeen, t0.Add(30*time.Second)) || s.Queued != 3 || s.OfflineSince != nil {
		t.Fatalf("after a summary: %+v", s)
	}
	// The link goes down; the broker notices 40 s later.
	clk.add(40 * time.Second)
	e.HandleMessage(protocol.SitePresenceTopic("s1"), presenceMsg("s1", false))
	settle(t, e)
	heard := t0.Add(30 * time.Second)
	if s := siteInfo(t, e, "s1"); s.Online || !same(s.OfflineSince, heard) || !same(s.LastSeen, heard) || s.Queued != 3 {
		t.Fatalf("after the site went offline: %+v", s)
	}
	// Long past the node's deadline: it does not time out.
	clk.add(time.Hour)
	tickNow(t, e)
	if s := state(t, e, id); s != fsm.CleanWait {
		t.Fatalf("node of an unreachable site timed out: %s", s)
	}
	e.Close()

	// A restarted coordinator: the site is still unreachable since it
	// was last heard, and still nothing times out.
	clk.add(time.Hour)
	e = openEngine(t, dir, clk)
	s := siteInfo(t, e, "s1")
	if s.Online || !same(s.OfflineSince, heard) || !same(s.LastSeen, heard) || s.Queued != 3 || !same(s.QueuedAt, heard) {
		t.Fatalf("after a restart: %+v", s)
	}
	tickNow(t, e)
	if s := state(t, e, id); s != fsm.CleanWait {
		t.Fatalf("node of an unreachable site timed out after a restart: %s", s)
	}
	// The site returns: 30 s of the node's 10 min were spent while the
	// site was reachable, 9m30s are left.
	back := clk.now()
	e.HandleMessage(protocol.SitePresenceTopic("s1"), presenceMsg("s1", true))
	settle(t, e)
	var deadline time.Time
	_ = e.View(id, func(n *fsm.Node, _ bool) error { deadline = n.Deadline; return nil })
	if want := back.Add(9*time.Minute + 30*time.Second); !deadline.Equal(want) {
		t.Fatalf("deadline after the return: %v, want %v (back + 9m30s)", deadline.Sub(back), want.Sub(back))
	}
	if s := siteInfo(t, e, "s1"); !s.Online || s.OfflineSince != nil || !same(s.LastSeen, back) {
		t.Fatalf("after the return: %+v", s)
	}
	clk.add(9 * time.Minute)
	tickNow(t, e)
	if s := state(t, e, id); s != fsm.CleanWait {
		t.Fatalf("timed out 9 reachable minutes after the return: %s", s)
	}
	clk.add(31 * time.Second)
	waitState(t, e, id, fsm.CleanFailed)
}

// TestSiteReachRestartWhileOnline: a coordinator that stops while a site
// is connected finds it, after the restart, unreachable since it was
// last seen (its connection's last refresh), not since ever.
func TestSiteReachRestartWhileOnline(t *testing.T) {
	old := reachSaveInterval
	reachSaveInterval = 50 * time.Millisecond
	t.Cleanup(func() { reachSaveInterval = old })
	dir := t.TempDir()
	clk := &testClock{}
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	clk.set(t0)
	e := openEngine(t, dir, clk)
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	e.HandleMessage(protocol.SitePresenceTopic("s1"), presenceMsg("s1", true))
	settle(t, e)
	// Connected and silent for 5 minutes: the saver records it seen.
	clk.add(5 * time.Minute)
	seen := t0.Add(5 * time.Minute)
	if !waitfor.Until(10*time.Second, func() bool {
		var saved time.Time
		_ = e.do(func(*tx) error { saved = e.reach().Site("s1").Saved; return nil })
		return saved.Equal(seen)
	}) {
		t.Fatal("the saver did not record the connected site seen at t0+5m within 10 s")
	}
	e.Close()
	clk.add(time.Hour)
	e = openEngine(t, dir, clk)
	s := siteInfo(t, e, "s1")
	if s.Online || !same(s.OfflineSince, t0.Add(5*time.Minute)) {
		t.Fatalf("after a restart: %+v (want offline since t0+5m)", s)
	}
}

// TestSiteSummaryAfterWill: the agent reconnected before the broker
// noticed its dead connection, so the old connection's last will
// (offline) came after the new one's online presence. The next heartbeat
// summary, which only a connected agent sends, makes the site reachable
// again, its nodes' deadlines moved as for any return.
func TestSiteSummaryAfterWill(t *testing.T) {
	clk := &testClock{}
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	clk.set(t0)
	e := openEngine(t, t.TempDir(), clk)
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	e.HandleMessage(protocol.SitePresenceTopic("s1"), presenceMsg("s1", true))
	n, err := e.CreateNode(NodeSpec{Name: "n1", Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	id := n.UUID
	err = e.do(func(t *tx) error {
		n := e.reg.nodes[id]
		n.ProvisionState, n.TargetProvisionState = fsm.CleanWait, fsm.Available
		n.Op = &fsm.Operation{Verb: fsm.Provide, Target: fsm.Available, Phase: "clean", StartedAt: t.now}
		n.Reservation = "coordinator"
		n.Deadline = t.now.Add(10 * time.Minute)
		t.dirty[id] = n
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	clk.add(20 * time.Second)
	e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindBeats, ID: "sum1", Site: "s1", Queued: 1}))
	settle(t, e)
	clk.add(40 * time.Second)
	e.HandleMessage(protocol.SitePresenceTopic("s1"), presenceMsg("s1", false))
	settle(t, e)
	if e.SiteOnline("s1") {
		t.Fatal("site online after its will")
	}
	clk.add(2 * time.Minute)
	back := clk.now()
	e.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindBeats, ID: "sum2", Site: "s1", Queued: 0}))
	settle(t, e)
	if !e.SiteOnline("s1") {
		t.Fatal("a heartbeat summary did not make the site reachable again")
	}
	var deadline time.Time
	_ = e.View(id, func(n *fsm.Node, _ bool) error { deadline = n.Deadline; return nil })
	// Heard at t0+20s, unreachable until back: 20 s of 10 min spent.
	if want := back.Add(9*time.Minute + 40*time.Second); !deadline.Equal(want) {
		t.Fatalf("deadline %v after the return, want 9m40s", deadline.Sub(back))
	}
	if s := siteInfo(t, e, "s1"); !s.Online || s.OfflineSince != nil || s.Queued != 0 {
		t.Fatalf("after the summary: %+v", s)
	}
}

// quietLog logs warnings and errors into the test's log.
func quietLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
