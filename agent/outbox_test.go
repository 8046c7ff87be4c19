package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/lib/waitfor"
	"github.com/bmedge/bmedge/protocol"
)

// syncBuffer is a log sink that tests read while the agent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// storedAgent is an agent with its outbox in dir ("" in memory), loaded
// as Run loads it, that publishes nothing (no link).
func storedAgent(t *testing.T, dir string, limit int, logs *syncBuffer) *Agent {
	t.Helper()
	var log *slog.Logger = slog.New(slog.DiscardHandler)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	a := New(Config{Site: "s1", StateDir: dir, OutboxLimit: limit, Log: log})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	a.ctx = ctx
	s, err := outbox.OpenStore(dir, a.log)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.ob.Load(s); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *Agent) closeStore(t *testing.T) {
	t.Helper()
	if err := a.ob.Store().Close(); err != nil {
		t.Fatal(err)
	}
}

// items is a copy of the outbox's messages, by id.
func (a *Agent) items() map[string]outbox.Item {
	out := map[string]outbox.Item{}
	a.ob.Inspect(func(s *outbox.State) {
		for id, it := range s.Items {
			out[id] = it
		}
	})
	return out
}

// doneRecs is a copy of the outbox's done-records, by command id.
func (a *Agent) doneRecs() map[string]outbox.Done {
	out := map[string]outbox.Done{}
	a.ob.Inspect(func(s *outbox.State) {
		for id, d := range s.Done {
			out[id] = d
		}
	})
	return out
}

// hasDone is the done-record of cmd, if any.
func (a *Agent) hasDone(cmd string) (outbox.Done, bool) {
	d, ok := a.doneRecs()[cmd]
	return d, ok
}

// doneRec is the done-record of cmd (zero if none).
func (a *Agent) doneRec(cmd string) outbox.Done {
	d, _ := a.hasDone(cmd)
	return d
}

func result(a *Agent, node, cmd, id string, deadline time.Time) {
	a.ob.Send(protocol.BMCEvtTopic("s1"), &protocol.Message{Kind: protocol.KindResult, ID: id, Site: "s1", Node: node, Sent: time.Now(), CommandID: cmd, OK: true}, deadline)
}

func ack(t *testing.T, a *Agent, ids ...string) {
	t.Helper()
	b, err := protocol.Encode(&protocol.Message{Kind: protocol.KindAck, ID: "ack", Sent: time.Now(), AckIDs: ids})
	if err != nil {
		t.Fatal(err)
	}
	a.handle(protocol.BMCCmdTopic("s1"), b)
}

// outboxOrder is the outbox's result ids in the order they are resent.
func outboxOrder(a *Agent) string {
	var ids []string
	for _, it := range a.ob.Ordered() {
		m, _ := protocol.Decode(it.Payload)
		ids = append(ids, m.ID)
	}
	return strings.Join(ids, " ")
}

// What the coordinator has not acknowledged survives a restart of the
// agent, in order; acknowledged results come back as done-records (which
// answer a duplicate command without running it), acknowledged power
// reports not at all; a done-record past its retention is gone for good.
func TestOutboxStoredLoadedAcked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	a := storedAgent(t, dir, 0, nil)
	deadline := time.Now().Add(time.Minute)
	result(a, "n1", "c1", "r1", deadline)
	result(a, "n2", "c2", "r2", deadline)
	result(a, "n1", "c3", "r3", deadline)
	result(a, "n2", "c4", "r4", deadline)
	result(a, "n1", "c5", "r5", deadline)
	a.ob.Send(protocol.BMCEvtTopic("s1"), &protocol.Message{Kind: protocol.KindPower, ID: "p1", Site: "s1", Node: "n1", Sent: time.Now(), PowerState: protocol.PowerOn}, time.Time{})
	ack(t, a, "r2", "p1", "r4")
	// r4's done-record is forgotten (its retention and deadline passed).
	a.ob.Inspect(func(s *outbox.State) {
		d := s.Done["c4"]
		d.Acked, d.Deadline = time.Now().Add(-2*outbox.DoneRetention), time.Now().Add(-time.Minute)
		s.Done["c4"] = d
	})
	a.ob.Trim(time.Now())
	a.closeStore(t)

	b := storedAgent(t, dir, 0, nil)
	defer b.closeStore(t)
	if got := outboxOrder(b); got != "r1 r3 r5" {
		t.Fatalf("outbox after a restart: %q, want the unacknowledged results in their order, r1 r3 r5", got)
	}
	for _, c := range []string{"c1", "c2", "c3", "c5"} {
		if _, ok := b.hasDone(c); !ok {
			t.Errorf("done-record of %s lost in the restart", c)
		}
	}
	if _, ok := b.hasDone("c4"); ok {
		t.Error("a done-record past its retention came back after the restart")
	}
	if b.doneRec("c2").Acked.IsZero() || !b.doneRec("c1").Acked.IsZero() {
		t.Error("acknowledged and unacknowledged done-records are mixed up after the restart")
	}
	// A duplicate of the acknowledged c2 is kept from running by its
	// done-record (the agent has no BMC for n2: running it would put a
	// failed result in the outbox), and its result is not sent again:
	// the coordinator acked it after storing it.
	if b.doneRec("c2").Payload != nil {
		t.Error("an acknowledged done-record kept its payload through the restart")
	}
	b.runBMC(&protocol.Message{Kind: protocol.KindCommand, ID: "c2", Node: "n2", Driver: "fake", Action: protocol.ActionValidate, Deadline: deadline})
	if got := outboxOrder(b); got != "r1 r3 r5" {
		t.Fatalf("outbox after a duplicate of an acknowledged command: %q, want it unchanged (r1 r3 r5): neither run nor sent again", got)
	}
	// New results come after the loaded ones.
	result(b, "n1", "c6", "r6", deadline)
	if got := outboxOrder(b); got != "r1 r3 r5 r6" {
		t.Fatalf("outbox: %q, want r6 last", got)
	}
	ack(t, b, "r1", "r3", "r5", "r6")
	if b.Outbox() != 0 {
		t.Fatalf("outbox after acking everything: %d", b.Outbox())
	}
}

// The state folder is private and encrypted at rest: folder 0700, files
// 0600, a key file created on first start; a wrong or missing key is
// refused with an error that says what to do.
func TestOutboxAtRest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	a := storedAgent(t, dir, 0, nil)
	result(a, "n1", "c1", "r1-secret-marker", time.Now().Add(time.Minute))
	a.closeStore(t)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if fi.Mode().Perm()&^want != 0 {
			t.Errorf("%s has mode %04o, want at most %04o", p, fi.Mode().Perm(), want)
		}
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte("r1-secret-marker")) {
				t.Errorf("%s holds a result in the clear", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, outbox.KeyFile)
	if fi, err := os.Stat(keyFile); err != nil || fi.Size() != outbox.KeySize {
		t.Fatalf("key file: %v", err)
	}
	orig, _ := os.ReadFile(keyFile)
	wrong := make([]byte, outbox.KeySize)
	_, _ = rand.Read(wrong)
	if err := os.WriteFile(keyFile, wrong, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.OpenStore(dir, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "not the key") {
		t.Fatalf("opening with a wrong key: %v", err)
	}
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.OpenStore(dir, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "key file") {
		t.Fatalf("opening without the key: %v", err)
	}
	if err := os.WriteFile(keyFile, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := outbox.OpenStore(dir, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("opening with a key others may read: %v", err)
	}
	if err := os.Chmod(keyFile, 0o600); err != nil {
		t.Fatal(err)
	}
	b := storedAgent(t, dir, 0, nil)
	defer b.closeStore(t)
	if got := outboxOrder(b); got != "r1-secret-marker" {
		t.Fatalf("outbox with the original key back: %q", got)
	}
}

// recordingBMC counts the operations run on it.
type recordingBMC struct{ ops atomic.Int32 }

func (b *recordingBMC) Validate(context.Context) error                                { b.ops.Add(1); return nil }
func (b *recordingBMC) SetPower(context.Context, string) error                        { b.ops.Add(1); return nil }
func (b *recordingBMC) PowerState(context.Context) (string, error)                    { return protocol.PowerOn, nil }
func (b *recordingBMC) SetBootDevice(context.Context, string) error                   { b.ops.Add(1); return nil }
func (b *recordingBMC) RunStep(context.Context, string, string, map[string]any) error { return nil }

// At OutboxLimit the agent says so once, runs no new BMC command (its
// result would have no room; the coordinator sends it again) and drops
// nothing; an ack makes room and the command runs when it comes again.
func TestOutboxLimit(t *testing.T) {
	var logs syncBuffer
	a := storedAgent(t, "", 2, &logs)
	defer a.closeStore(t)
	bmc := &recordingBMC{}
	a.bmcs.Put("n3", "test", bmc)
	deadline := time.Now().Add(time.Minute)
	result(a, "n1", "c1", "r1", deadline)
	result(a, "n2", "c2", "r2", deadline)
	if !strings.Contains(logs.String(), "the outbox is full") {
		t.Fatalf("no log when the outbox reached its limit:\n%s", logs.String())
	}
	cmd := &protocol.Message{Kind: protocol.KindCommand, ID: "c3", Node: "n3", Driver: "test", Action: protocol.ActionValidate, Deadline: deadline}
	a.runBMC(cmd)
	a.runBMC(cmd)
	if n := bmc.ops.Load(); n != 0 || a.Outbox() != 2 {
		t.Fatalf("with a full outbox: %d BMC operations ran, outbox %d (want 0 and the 2 results kept)", n, a.Outbox())
	}
	if got := strings.Count(logs.String(), "the outbox is full"); got != 1 {
		t.Fatalf("the full outbox was logged %d times, want once", got)
	}
	ack(t, a, "r1")
	if !strings.Contains(logs.String(), "room again") {
		t.Fatalf("no log when the outbox had room again:\n%s", logs.String())
	}
	// Run with a live context (a cancelled one may fail the command
	// before it gets a BMC slot), cancelled once its result is stored so
	// that publishing, which has no link here, gives up.
	ctx, cancel := context.WithCancel(context.Background())
	a.ctx = ctx
	ran := make(chan struct{})
	go func() { defer close(ran); a.runBMC(cmd) }()
	if !waitfor.Until(30*time.Second, func() bool { return a.Outbox() >= 2 && bmc.ops.Load() >= 1 }) {
		t.Fatalf("the command did not run after an ack made room: %d BMC operations, outbox %d", bmc.ops.Load(), a.Outbox())
	}
	cancel()
	<-ran
	c3 := a.doneRec("c3").ID
	if n := bmc.ops.Load(); n != 1 || outboxOrder(a) != "r2 "+c3 {
		t.Fatalf("after an ack made room: %d BMC operations, outbox %q", n, outboxOrder(a))
	}
}

// Results sent at once from many goroutines are all stored, sharing
// commits (group commit), and all come back.
func TestOutboxConcurrentSends(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	a := storedAgent(t, dir, 0, nil)
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			result(a, "n", "c"+string(rune('a'+i%26))+time.Duration(i).String(), "r"+time.Duration(i).String(), time.Now().Add(time.Minute))
		}()
	}
	wg.Wait()
	commits := a.ob.Store().Commits()
	a.closeStore(t)
	t.Logf("%d results in %d commits", n, commits)
	b := storedAgent(t, dir, 0, nil)
	defer b.closeStore(t)
	if b.Outbox() != n || len(b.doneRecs()) != n {
		t.Fatalf("after a restart: outbox %d, done %d, want %d each", b.Outbox(), len(b.doneRecs()), n)
	}
}
