package engine

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// recordPlan is a plan as the fsm makes one: a reboot into the ramdisk,
// the wait for it and an in-band step.
func recordPlan() []fsm.Action {
	return []fsm.Action{
		{Kind: fsm.ActOOB, Action: protocol.ActionPower, Args: map[string]any{"state": "rebooted", "boot_device": "pxe"}},
		{Kind: fsm.ActAwaitAgent},
		{Kind: fsm.ActStep, Step: &fsm.StepRun{Interface: "deploy", Step: "write_image", Priority: 80, InBand: true}},
	}
}

// recordNodes are nodes in the forms a record takes: at rest; in an
// operation whose pending command repeats every field the record holds;
// one whose command differs from them in each of those fields; and an
// operation with no plan left.
func recordNodes() []*fsm.Node {
	now := time.Date(2026, 12, 7, 10, 0, 0, 123, time.UTC)
	rest := &fsm.Node{UUID: "11111111-1111-1111-1111-111111111111", Name: "rest", Driver: "fake", Site: "s1", ProvisionState: fsm.Available, CreatedAt: now}
	busy := func(uuid string) *fsm.Node {
		n := &fsm.Node{UUID: uuid, Driver: "fake", Site: "s1", ProvisionState: fsm.DeployWait, TargetProvisionState: fsm.Active,
			AgentToken: "tok-" + uuid[:4], BootNonce: "nonce", Deadline: now.Add(30 * time.Minute), CmdSeq: 7,
			InstanceInfo: map[string]any{"image_source": "http://127.0.0.1/img"}}
		n.Op = &fsm.Operation{Verb: fsm.Deploy, Target: fsm.Active, Phase: fsm.PhaseDeploy, Plan: recordPlan(), Index: 2, StartedAt: now}
		msg := &protocol.Message{V: protocol.Version, Kind: protocol.KindCommand, ID: "cmd-" + uuid[:4], Site: n.Site, Node: n.UUID, Sent: now,
			Token: n.AgentToken, Seq: 7, Action: protocol.ActionInbandRun, Deadline: n.Deadline}
		n.Pending = &fsm.Command{ID: msg.ID, Topic: protocol.NodeCmdTopic(n.Site, n.UUID), Msg: msg, LastSent: now, Attempts: 2, Accepted: true, InBand: true}
		return n
	}
	same := busy("22222222-2222-2222-2222-222222222222")
	other := busy("33333333-3333-3333-3333-333333333333")
	other.Pending.ID = "not-the-message-id"
	other.Pending.Topic = protocol.BMCCmdTopic("s1")
	other.Pending.Msg.Site, other.Pending.Msg.Node = "s2", "44444444-4444-4444-4444-444444444444"
	other.Pending.Msg.Token = "an older token"
	other.Pending.Msg.Deadline = other.Deadline.In(time.FixedZone("elsewhere", 3600))
	empty := busy("55555555-5555-5555-5555-555555555555")
	empty.Op.Plan, empty.Op.Index = nil, 0
	empty.Pending.Msg.Token, empty.AgentToken = "", ""
	return []*fsm.Node{rest, same, other, empty}
}

// TestRecordShortForm: a node record leaves out its plan (stored once,
// named by plan_ref) and the pending command's copies of its own fields,
// and reads back as the same node, byte for byte in JSON; a command whose
// fields differ from the node's keeps them.
func TestRecordShortForm(t *testing.T) {
	e := &Engine{reg: newRegistry()}
	tx := bareTx(e)
	var recs [][]byte
	for _, n := range recordNodes() {
		b, err := e.encodeNode(tx, n)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, b)
	}
	plans := map[string][]byte{}
	tx.batch.Each(func(k string, v []byte) {
		if r, ok := strings.CutPrefix(k, store.PlanCatalogPrefix); ok && v != nil {
			plans[r] = v
		}
	})
	if len(plans) != 1 {
		t.Fatalf("%d plans stored for two nodes with the same plan, want 1", len(plans))
	}
	same, other := string(recs[1]), string(recs[2])
	if strings.Contains(same, `"plan":`) || !strings.Contains(same, `"plan_ref":"`) || strings.Contains(same, "write_image") {
		t.Fatalf("record carries its plan instead of naming it: %s", same)
	}
	for copy, want := range map[string]int{`"topic"`: 0, `"node":`: 0, `"token":`: 0, `"site":`: 1, `"deadline":`: 1, `"id":"cmd-2222"`: 1, "tok-2222": 1} {
		if got := strings.Count(same, copy); got != want {
			t.Errorf("record holds %s %d times, want %d (the pending command's copy left out): %s", copy, got, want, same)
		}
	}
	for _, kept := range []string{`"id":"not-the-message-id"`, `"topic":"` + protocol.BMCCmdTopic("s1"), `"site":"s2"`, `"node":"44444444`, `"token":"an older token"`, `"deadline":"2026-12-07T11:30:00.000000123+01:00"`} {
		if !strings.Contains(other, kept) {
			t.Errorf("record of a command that differs from its node lost %s: %s", kept, other)
		}
	}
	if strings.Contains(string(recs[3]), "plan_ref") {
		t.Errorf("an operation with no plan got a plan ref: %s", recs[3])
	}

	d := &Engine{reg: newRegistry()}
	d.reg.plans.loaded = plans
	for i, n := range recordNodes() {
		got, err := d.decodeNode(recs[i])
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(n)
		have, _ := json.Marshal(got)
		if string(want) != string(have) {
			t.Errorf("node %s read back differs:\n got %s\nwant %s", n.UUID, have, want)
		}
	}
	if d.reg.plans.refs[firstKey(plans)] != 2 {
		t.Errorf("after loading, the plan counts %d references, want 2", d.reg.plans.refs[firstKey(plans)])
	}
}

// startedIn starts an engine on dir with a site s1 registered.
func startedIn(t *testing.T, dir string) *Engine {
	t.Helper()
	e, err := New(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(&recorder{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.AddSite("s1"); err != nil {
		t.Fatal(err)
	}
	return e
}

// createFake creates nodes of the fake driver by name; it returns their
// UUIDs.
func createFake(t *testing.T, e *Engine, names ...string) []string {
	t.Helper()
	var ids []string
	for _, name := range names {
		n, err := e.CreateNode(NodeSpec{Name: name, Driver: "fake"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, n.UUID)
	}
	return ids
}

// writeOffline commits b to the store in dir while no engine runs on it
// (records as an earlier version, or a crash, left them).
func writeOffline(t *testing.T, dir string, b *store.Batch) {
	t.Helper()
	key, err := store.LoadKey(filepath.Join(dir, "db.key"), filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(filepath.Join(dir, "db"), key, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Commit(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// bareTx is a batch of an engine that is not started.
func bareTx(e *Engine) *tx {
	return &tx{e: e, now: time.Now(), dirty: map[string]*fsm.Node{}, touched: map[string]struct{}{}, acks: map[string][]string{}}
}

func firstKey(m map[string][]byte) string {
	for k := range m {
		return k
	}
	return ""
}

// TestPlanChangedInPlaceCaught: a plan changed inside its slice (which
// the short form would not notice outside tests) fails the commit that
// stores it, in test binaries.
func TestPlanChangedInPlaceCaught(t *testing.T) {
	e := &Engine{reg: newRegistry()}
	n := recordNodes()[1]
	if _, err := e.encodeNode(bareTx(e), n); err != nil {
		t.Fatal(err)
	}
	n.Op.Plan[2].Step.Priority = 81
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "changed in place") {
			t.Fatalf("a plan changed in place was stored without complaint (recovered %v)", r)
		}
	}()
	_, _ = e.encodeNode(bareTx(e), n)
}

// TestPlansStoredAndDropped: nodes in one operation name one stored plan,
// get their plan and command back after a restart, and the plan leaves
// the store with its operation; a record written before (plan and
// command inline) still loads.
func TestPlansStoredAndDropped(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{DataDir: dir}
	e := startedIn(t, dir)
	ids := createFake(t, e, "a", "b", "c")
	for _, id := range ids {
		if err := e.Verb(id, fsm.VerbRequest{Verb: fsm.Manage}); err != nil {
			t.Fatal(err)
		}
	}
	if got := scanKeys(t, e, store.PlanCatalogPrefix); len(got) != 1 {
		t.Fatalf("%d plans stored for three nodes managed alike, want 1", len(got))
	}
	want := map[string]string{}
	if err := e.do(func(*tx) error {
		for _, id := range ids {
			b, _ := json.Marshal(e.reg.nodes[id])
			want[id] = string(b)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Node c's record as an earlier version wrote it: all inline.
	var old []byte
	_ = e.do(func(*tx) error { old, _ = json.Marshal(e.reg.nodes[ids[2]]); return nil })
	e.Close()
	var batch store.Batch
	batch.Set(store.NodePrefix+ids[2], old)
	writeOffline(t, dir, &batch)

	// Read back as loaded, before the engine starts (a start resends
	// what was pending, which changes the records).
	e2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	for _, id := range ids {
		b, _ := json.Marshal(e2.reg.nodes[id])
		if string(b) != want[id] {
			t.Errorf("node %s after restart:\n got %s\nwant %s", id, b, want[id])
		}
	}
	if got := e2.reg.plans.refs; len(got) != 1 || got[firstKey(scanKeys(t, e2, store.PlanCatalogPrefix))[len(store.PlanCatalogPrefix):]] != 2 {
		t.Fatalf("plan references after restart %v, want one plan named by the two short records", got)
	}
	rec := &recorder{}
	if err := e2.Start(rec); err != nil {
		t.Fatal(err)
	}
	e2.HandleMessage(protocol.SitePresenceTopic("s1"), mustJSON(&protocol.Message{V: 1, Kind: protocol.KindPresence, Site: "s1", Online: true}))
	for _, id := range ids {
		cmd, _ := rec.next(t, id, 0)
		e2.HandleMessage(protocol.BMCEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindResult, ID: "r-" + cmd.ID, Node: cmd.Node, CommandID: cmd.ID, OK: true}))
	}
	for _, id := range ids {
		waitState(t, e2, id, fsm.Manageable)
	}
	if err := e2.Settle(); err != nil {
		t.Fatal(err)
	}
	if got := scanKeys(t, e2, store.PlanCatalogPrefix); len(got) != 0 {
		t.Fatalf("%d plans left in the store after every operation ended, want 0", len(got))
	}
}

// TestDeleteAfterChangeInOneBatch: a node changed and then deleted in one
// batch stays deleted (its change is not written back after the delete).
func TestDeleteAfterChangeInOneBatch(t *testing.T) {
	e, _ := newEngine(t, Config{})
	n, err := e.CreateNode(NodeSpec{Name: "gone", Driver: "fake"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.do(func(t *tx) error {
		m := e.reg.nodes[n.UUID]
		m.Description = "changed first"
		t.dirty[m.UUID] = m
		_, err := e.deleteNode(t, n.UUID)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got := scanKeys(t, e, store.NodePrefix+n.UUID); len(got) != 0 {
		t.Fatalf("the node deleted after a change in the same batch is still stored: %s", got)
	}
}

// TestLaterRecordFormatRefused: a data folder marked with a later record
// format is refused at start with what to do; this version marks its own.
func TestLaterRecordFormatRefused(t *testing.T) {
	dir := t.TempDir()
	e, err := New(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if v, _, _ := e.st.Get(formatKey); string(v) != "2" {
		t.Fatalf("record format key %q after start, want 2", v)
	}
	e.Close()
	var b store.Batch
	b.Set(formatKey, []byte("3"))
	writeOffline(t, dir, &b)
	if e, err := New(Config{DataDir: dir}); err == nil || !strings.Contains(err.Error(), "format 3, written by a later version") {
		if e != nil {
			e.Close()
		}
		t.Fatalf("a data folder of a later record format: %v, want a refusal that says so", err)
	}
}
