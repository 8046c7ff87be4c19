// Package outbox is the edge agent's durable outbox and its one
// exactly-once command runner. It owns what goes to the coordinator
// until the coordinator acknowledges it (results, power reports, the
// heartbeat summaries), the done-records that keep a command from
// running twice, and each node's latest command Seq; all of it under its
// own lock, on the Badger store of store.go. It never decides anything
// about a node: callers hand it messages and commands.
package outbox

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// DoneRetention is how long a command is remembered after the
// coordinator acknowledged its result, so that a late duplicate of the
// command (a broker redelivery) does not run again; only the command's
// id and deadline are kept past the ack, not the result. After that, and
// after the command's own deadline, a duplicate cannot arrive in time to
// run. Remembering every result for an hour made the agent grow by every
// command of the last hour (~70 MB for 1000 nodes cycling for a minute).
const DoneRetention = 10 * time.Minute

// Config configures an outbox.
type Config struct {
	Site string
	// Dir is the state folder (only named in logs: OpenStore opens it).
	Dir string
	// Limit bounds what waits for the coordinator's ack (default
	// DefaultLimit): at the limit Full is true and commands that check
	// it are not run; nothing is ever dropped.
	Limit int
	// Resend is how long an unacknowledged message waits before it is
	// sent again (default 5 s).
	Resend time.Duration
	Log    *slog.Logger
	// Clock is the clock (default clock.Real): message times, resend
	// and retention.
	Clock clock.Clock
	// Publish queues a message for the coordinator (the uplink); nil
	// publishes nothing.
	Publish func(topic string, payload []byte)
	// Resent counts the messages sent again (metrics); may be nil.
	Resent func(n int)
}

// Item is a message in the outbox.
type Item struct {
	Topic   string
	Payload []byte
	Sent    time.Time
	Cmd     string // the command a result answers ("" for other messages)
	Node    string // the node it is about ("" for summaries, site-wide results)
	Seq     uint64 // its record in the store
	// MemOnly marks what is never written to the store (heartbeat
	// summaries): acking it writes nothing either.
	MemOnly bool
}

// Done is a done-record: a command that ran and its result.
type Done struct {
	Topic, ID string
	Node      string // the command's node
	CmdSeq    uint64 // the command's Seq (0: not stamped)
	Payload   []byte
	At        time.Time
	// Deadline is the command's: a copy arriving after it cannot run.
	Deadline time.Time
	// Acked is when the coordinator acknowledged the result.
	Acked time.Time
	Seq   uint64 // its record in the store
}

// record is a done-record as the store keeps it.
func (d Done) record(cmd string) *Record {
	return &Record{ID: d.ID, Topic: d.Topic, Payload: d.Payload, Cmd: cmd, CmdSeq: d.CmdSeq, Node: d.Node, At: d.At, Deadline: d.Deadline, Acked: d.Acked}
}

// State is the outbox's bookkeeping, reached with Inspect.
type State struct {
	Items map[string]Item // message id → message
	Done  map[string]Done // command id → its result, for duplicates
	// Latest is, per node, the highest command Seq started (see
	// protocol.Message.Seq): a command with a lower one is a stale copy,
	// and the done-records of acked commands below it can go at once.
	Latest  map[string]uint64
	Running map[string]bool // commands running now
	// Seq numbers the messages put in the outbox, in order.
	Seq uint64
}

// Outbox is the durable outbox of one edge agent.
type Outbox struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	st    State
	full  bool // at Limit
	store *Store
	// resending is set while ResendAll runs; resendAgain asks it for
	// one more pass.
	resending, resendAgain bool
	// intents are the Intent commands started before a restart whose
	// result was not kept (Load); a copy of one calls its Resumed.
	intents map[string]intent
}

// New returns an empty outbox with no store (nothing is written until
// Load gives it one).
func New(cfg Config) *Outbox {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Limit <= 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.Resend <= 0 {
		cfg.Resend = 5 * time.Second
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.Publish == nil {
		cfg.Publish = func(string, []byte) {}
	}
	if cfg.Resent == nil {
		cfg.Resent = func(int) {}
	}
	return &Outbox{cfg: cfg, log: cfg.Log, st: State{Items: map[string]Item{}, Done: map[string]Done{}, Latest: map[string]uint64{}, Running: map[string]bool{}}}
}

// NewID is a fresh message id.
func NewID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Store is the store Load gave the outbox (nil before).
func (o *Outbox) Store() *Store {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.store
}

// Inspect calls fn with the outbox's bookkeeping, under its lock (for
// tests and the metrics). fn must not call the outbox.
func (o *Outbox) Inspect(fn func(*State)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fn(&o.st)
	o.noteLocked()
}

// Len is how many messages wait for the coordinator's ack.
func (o *Outbox) Len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.st.Items)
}

// Kept is how many of the messages waiting for the coordinator's ack are
// in the store (results and reports; not the memory-only summaries): what
// a restart would send again.
func (o *Outbox) Kept() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, it := range o.st.Items {
		if !it.MemOnly {
			n++
		}
	}
	return n
}

// Full tells whether the outbox is at its limit.
func (o *Outbox) Full() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.noteLocked()
	return o.full
}

// Load takes the records of an earlier run from s, which the outbox
// writes to from then on: the unacknowledged ones are the outbox (resent
// once connected, in the order they were written), and the results are
// the done-records that answer duplicate commands.
func (o *Outbox) Load(s *Store) error {
	seqs, recs, err := s.Load()
	if err != nil {
		return fmt.Errorf("read the outbox in the state folder: %w", err)
	}
	now := o.cfg.Clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	o.store = s
	for i, r := range recs {
		seq := seqs[i]
		o.st.Seq = max(o.st.Seq, seq)
		node := r.Node
		if node == "" {
			node = nodeOf(r.Topic, r.Payload) // written by an older agent
		}
		if r.Acked.IsZero() {
			o.st.Items[r.ID] = Item{Topic: r.Topic, Payload: r.Payload, Sent: now, Cmd: r.Cmd, Node: node, Seq: seq}
		}
		if r.Cmd != "" {
			o.st.Done[r.Cmd] = Done{Topic: r.Topic, ID: r.ID, Node: node, CmdSeq: r.CmdSeq, Payload: r.Payload, At: r.At, Deadline: r.Deadline, Acked: r.Acked, Seq: seq}
			if node != "" {
				o.st.Latest[node] = max(o.st.Latest[node], r.CmdSeq)
			}
		} else if !r.Acked.IsZero() {
			s.Later(seq, nil)
		}
	}
	kept, err := s.LoadIntents()
	if err != nil {
		return fmt.Errorf("read the started commands in the state folder: %w", err)
	}
	for cmd, b := range kept {
		var in intent
		_ = json.Unmarshal(b, &in)
		if _, done := o.st.Done[cmd]; done || (!in.Deadline.IsZero() && now.After(in.Deadline)) {
			s.DropIntent(cmd) // answered, or no copy will come any more
			continue
		}
		if o.intents == nil {
			o.intents = map[string]intent{}
		}
		o.intents[cmd] = in
	}
	if len(recs) > 0 {
		o.log.Info("outbox loaded from the state folder: what the coordinator has not acknowledged is sent again once connected",
			"state_dir", o.cfg.Dir, "unacknowledged", len(o.st.Items), "done_records", len(o.st.Done))
	}
	o.noteLocked()
	return nil
}

// nodeOf is the node a stored message is about: its topic's, or for a
// message on the site's bmc/evt topic the node it names.
func nodeOf(topic string, payload []byte) string {
	if _, node, _, err := protocol.ParseTopic(topic); err == nil && node != "" {
		return node
	}
	var m struct {
		Node string `json:"node"`
	}
	_ = json.Unmarshal(payload, &m)
	return m.Node
}

// noteLocked logs when the outbox reaches its limit and when it has room
// again; o.mu is held.
func (o *Outbox) noteLocked() {
	switch n := len(o.st.Items); {
	case n >= o.cfg.Limit && !o.full:
		o.full = true
		o.log.Error("the outbox is full: results and power reports the coordinator has not acknowledged reached the limit (agent --outbox-limit); until acks make room, no new BMC command runs (the coordinator sends its commands again) and no power reading is taken; nothing is dropped",
			"site", o.cfg.Site, "outbox", n, "limit", o.cfg.Limit, "state_dir", o.cfg.Dir)
	case n < o.cfg.Limit && o.full:
		o.full = false
		o.log.Info("the outbox has room again: BMC commands and power readings resume", "site", o.cfg.Site, "outbox", n, "limit", o.cfg.Limit)
	}
}

// Send puts a message into the outbox, on disk first, and publishes it;
// it is resent until acked. A result also becomes its command's
// done-record. deadline is the deadline of the command a result answers.
func (o *Outbox) Send(topic string, m *protocol.Message, deadline time.Time) {
	b, err := protocol.Encode(m)
	if err != nil {
		o.log.Error("not sending invalid message", "err", err)
		return
	}
	if len(b) > protocol.MaxMessageBytes && m.Kind == protocol.KindResult {
		// The coordinator would refuse it (and the broker close the WAN
		// connection): the command fails instead, saying why.
		o.log.Error("a result is larger than a message may be: sent as a failure without its data", "node", m.Node, "command", m.CommandID,
			"bytes", len(b), "limit", protocol.MaxMessageBytes)
		f := *m
		f.OK, f.Data = false, nil
		f.Error = fmt.Sprintf("the edge agent's result for this command was %d bytes, larger than a message may be (%d bytes); its data and error text were dropped", len(b), protocol.MaxMessageBytes)
		if b, err = protocol.Encode(&f); err != nil {
			o.log.Error("not sending invalid message", "err", err)
			return
		}
		m = &f
	}
	now := o.cfg.Clock.Now()
	rec := &Record{ID: m.ID, Topic: topic, Payload: b, Node: m.Node, At: now, Deadline: deadline}
	if m.Kind == protocol.KindResult {
		rec.Cmd, rec.CmdSeq = m.CommandID, m.Seq
	}
	o.mu.Lock()
	o.st.Seq++
	seq := o.st.Seq
	store := o.store
	o.mu.Unlock()
	// On disk before it is published: a crash right after publishing
	// cannot lose what the coordinator has not acknowledged.
	if err := store.Put(seq, rec); errors.Is(err, ErrClosed) {
		o.log.Warn("edge agent stopping: a message produced while it stops is not kept", "node", m.Node, "kind", m.Kind, "command", m.CommandID)
		return
	} else if err != nil {
		o.log.Error("a result could not be written to the state folder: it is kept in memory and sent, but a crash before the coordinator acknowledges it would lose it",
			"node", m.Node, "command", m.CommandID, "err", err)
	}
	o.mu.Lock()
	o.st.Items[m.ID] = Item{Topic: topic, Payload: b, Sent: o.cfg.Clock.Now(), Cmd: rec.Cmd, Node: m.Node, Seq: seq}
	if m.Kind == protocol.KindResult {
		o.st.Done[m.CommandID] = Done{Topic: topic, ID: m.ID, Node: m.Node, CmdSeq: m.Seq, Payload: b, At: now, Deadline: deadline, Seq: seq}
	}
	o.noteLocked()
	o.mu.Unlock()
	o.cfg.Publish(topic, b)
}

// PutMemOnly puts a message that is never written to disk (a heartbeat
// summary: only worth its latest state, which the ramdisks' next
// heartbeats rebuild after a restart) into the outbox and publishes it.
func (o *Outbox) PutMemOnly(id, topic string, payload []byte) {
	o.mu.Lock()
	o.st.Seq++
	o.st.Items[id] = Item{Topic: topic, Payload: payload, Sent: o.cfg.Clock.Now(), Seq: o.st.Seq, MemOnly: true}
	o.mu.Unlock()
	o.cfg.Publish(topic, payload)
}

// Withdraw takes a message the coordinator has not acknowledged out of
// the outbox, and tells whether it was there.
func (o *Outbox) Withdraw(id string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	it, ok := o.st.Items[id]
	if !ok {
		return false
	}
	delete(o.st.Items, id)
	if !it.MemOnly {
		o.store.Later(it.Seq, nil)
	}
	o.noteLocked()
	return true
}

// Ack removes what the coordinator acknowledged from the outbox; a
// command's result stays as its done-record.
func (o *Outbox) Ack(ids []string) {
	now := o.cfg.Clock.Now()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		it, ok := o.st.Items[id]
		if !ok {
			continue
		}
		delete(o.st.Items, id)
		if it.MemOnly {
			continue
		}
		if d, ok := o.st.Done[it.Cmd]; ok && it.Cmd != "" && d.ID == id {
			// Kept as the command's done-record until its retention
			// ends (Trim), without its payload: the coordinator has the
			// result, a duplicate of the command only must not run.
			d.Acked = now
			d.Payload = nil
			o.st.Done[it.Cmd] = d
			o.store.Later(it.Seq, d.record(it.Cmd))
		} else {
			o.store.Later(it.Seq, nil)
		}
	}
	o.noteLocked()
}

// Forget drops a deleted node's results and reports, in the outbox and
// as done-records, and its latest Seq: the coordinator deleted the node
// (and acks, without applying, any copy already on its way).
func (o *Outbox) Forget(node string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.st.Latest, node)
	for id, it := range o.st.Items {
		if it.Node == node && !it.MemOnly {
			delete(o.st.Items, id)
			o.store.Later(it.Seq, nil)
		}
	}
	for cmd, d := range o.st.Done {
		if d.Node == node {
			delete(o.st.Done, cmd)
			o.store.Later(d.Seq, nil)
		}
	}
	o.noteLocked()
}

// Redo puts the stored result of a command that already ran back into
// the outbox (unacknowledged again, on disk too) and returns it, to
// answer a duplicate of the command without running it again. A result
// the coordinator acknowledged is not sent again: it has it on disk (it
// acks only after its commit), so its done-record keeps no payload and a
// duplicate is only kept from running (the payload returned is nil).
func (o *Outbox) Redo(cmd string) (Done, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.redoLocked(cmd)
}

func (o *Outbox) redoLocked(cmd string) (Done, bool) {
	d, ok := o.st.Done[cmd]
	if !ok {
		return d, false
	}
	if !d.Acked.IsZero() && d.Payload == nil {
		return d, true
	}
	o.st.Items[d.ID] = Item{Topic: d.Topic, Payload: d.Payload, Sent: o.cfg.Clock.Now(), Cmd: cmd, Node: d.Node, Seq: d.Seq}
	if !d.Acked.IsZero() {
		unacked := d
		unacked.Acked = time.Time{}
		o.store.Later(d.Seq, unacked.record(cmd))
	}
	o.noteLocked()
	return d, true
}

// Outcome is what Once did with a command.
type Outcome int

const (
	// Ran: the command ran (its result, if any, is in the outbox).
	Ran Outcome = iota
	// Redone: it ran before; its result was sent again (unless acked).
	Redone
	// Running: a copy of it is running now.
	Running
	// Stale: a newer command of its node has started (CheckSeq).
	Stale
	// Full: the outbox is at its limit (CheckFull); the coordinator
	// sends the command again.
	Full
	// Unsequenced: a node's command without a Seq, once the site has had
	// commands with one (CheckSeq): the coordinator stamps every node
	// command, so it is not the coordinator's.
	Unsequenced
)

// Command is one command for Once.
type Command struct {
	Msg *protocol.Message
	// CheckSeq refuses a copy older than a command of the node already
	// started, and a node's command without a Seq once any command with
	// one has been seen (Latest is not empty), and records the command's
	// Seq as the node's latest.
	CheckSeq bool
	// CheckFull does not run the command while the outbox is full.
	CheckFull bool
	// Start is called once the command is admitted, before Run; End
	// after its result is in the outbox. Either may be nil.
	Start, End func()
	// Run runs the command and returns its result (nil: none is kept,
	// as when the agent is stopping).
	Run func() *protocol.Message
	// Intent keeps, on disk before Run, that the command started (a
	// reboot, which must not run twice): a copy of it that comes after
	// the agent was killed while it ran (its intent kept, no result)
	// calls Resumed instead of Run, which says what became of it without
	// doing it again. Needs Resumed.
	Intent  bool
	Resumed func() *protocol.Message
}

// intent is what the store keeps of a started Intent command.
type intent struct {
	Node     string    `json:"node"`
	Deadline time.Time `json:"deadline,omitzero"`
}

// Once runs a command at most once, however many copies arrive: the
// skeleton every command of the edge agent that changes something shares
// (BMC commands, image pre-seeds). A duplicate of a command that ran is
// answered with its stored result; a copy of one running is dropped. The
// result goes to the site's bmc/evt topic.
func (o *Outbox) Once(c Command) Outcome {
	m := c.Msg
	o.mu.Lock()
	if d, ok := o.redoLocked(m.ID); ok {
		// A command we already ran: its result was lost or not yet acked
		// (an acked one is not sent again).
		o.mu.Unlock()
		if d.Payload != nil {
			o.cfg.Publish(d.Topic, d.Payload)
		}
		return Redone
	}
	if o.st.Running[m.ID] {
		o.mu.Unlock()
		return Running
	}
	if c.CheckSeq && m.Seq == 0 && m.Node != "" && len(o.st.Latest) > 0 {
		o.mu.Unlock()
		return Unsequenced
	}
	if c.CheckSeq && m.Seq != 0 && m.Seq < o.st.Latest[m.Node] {
		// A copy of a command older than one this node already started:
		// the coordinator has moved on from it, so it must not run (its
		// done-record may be gone: see Trim).
		o.mu.Unlock()
		return Stale
	}
	if o.noteLocked(); c.CheckFull && o.full {
		// Its result would have no room: the command is not run, and the
		// coordinator sends it again.
		o.mu.Unlock()
		return Full
	}
	o.st.Running[m.ID] = true
	if c.CheckSeq && m.Seq != 0 {
		o.st.Latest[m.Node] = max(o.st.Latest[m.Node], m.Seq)
	}
	_, resumed := o.intents[m.ID]
	store := o.store
	o.mu.Unlock()
	run := c.Run
	if c.Intent && c.Resumed != nil {
		if resumed {
			// Started by the agent before it was killed: it may have
			// acted; it is not run again.
			o.log.Info("command started before the agent restarted, its result not kept: not run again, its outcome read instead",
				"node", m.Node, "command", m.ID, "action", m.Action)
			run = c.Resumed
		} else if store != nil {
			b, _ := json.Marshal(intent{Node: m.Node, Deadline: m.Deadline})
			if err := store.PutIntent(m.ID, b); err != nil {
				// Not kept: a kill while it runs would let a copy run it
				// again, as before intents; it runs all the same.
				o.log.Warn("a command's start could not be kept in the state folder: it runs all the same", "node", m.Node, "command", m.ID, "err", err)
			}
		}
		defer func() {
			o.mu.Lock()
			delete(o.intents, m.ID)
			o.mu.Unlock()
		}()
	}
	if c.Start != nil {
		c.Start()
	}
	defer func() {
		o.mu.Lock()
		delete(o.st.Running, m.ID)
		o.mu.Unlock()
		if c.End != nil {
			c.End()
		}
	}()
	if res := run(); res != nil {
		o.Send(protocol.BMCEvtTopic(o.cfg.Site), res, m.Deadline)
		if c.Intent && store != nil {
			store.DropIntent(m.ID) // after the result, which is on disk now
		}
	}
	return Ran
}

// sortBySeq puts items in the order they were put in the outbox, so
// that each node's messages are sent again in their order.
func sortBySeq(items []Item) {
	slices.SortFunc(items, func(x, y Item) int { return cmp.Compare(x.Seq, y.Seq) })
}

// Ordered is the outbox's messages in the order they were put in.
func (o *Outbox) Ordered() []Item {
	o.mu.Lock()
	items := make([]Item, 0, len(o.st.Items))
	for _, it := range o.st.Items {
		items = append(items, it)
	}
	o.mu.Unlock()
	sortBySeq(items)
	return items
}

// ResendAll sends the whole outbox again, in order (the link came up).
// One runs at a time: a call while one runs makes it go once more when
// it ends (the link came up again meanwhile), instead of a second pass
// alongside; so a flapping link never queues the outbox many times over.
func (o *Outbox) ResendAll() {
	o.mu.Lock()
	if o.resending {
		o.resendAgain = true
		o.mu.Unlock()
		return
	}
	o.resending = true
	for {
		o.resendAgain = false
		items := make([]Item, 0, len(o.st.Items))
		for _, it := range o.st.Items {
			items = append(items, it)
		}
		o.mu.Unlock()
		sortBySeq(items)
		o.cfg.Resent(len(items))
		for _, it := range items {
			o.cfg.Publish(it.Topic, it.Payload)
		}
		o.mu.Lock()
		if !o.resendAgain {
			o.resending = false
			o.mu.Unlock()
			return
		}
	}
}

// ResendLoop sends again, every Resend/2, what waited Resend without an
// ack, and forgets the done-records that can go (Trim), until ctx ends.
func (o *Outbox) ResendLoop(ctx context.Context) {
	tk := o.cfg.Clock.NewTicker(o.cfg.Resend / 2)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C():
		}
		o.ResendDue(o.cfg.Clock.Now())
	}
}

// ResendDue sends again what waited Resend without an ack by now, and
// trims the done-records.
func (o *Outbox) ResendDue(now time.Time) {
	var due []Item
	o.mu.Lock()
	for id, it := range o.st.Items {
		if now.Sub(it.Sent) >= o.cfg.Resend {
			it.Sent = now
			o.st.Items[id] = it
			due = append(due, it)
		}
	}
	o.trimLocked(now)
	o.mu.Unlock()
	sortBySeq(due)
	o.cfg.Resent(len(due))
	for _, it := range due {
		o.cfg.Publish(it.Topic, it.Payload)
	}
}

// Trim forgets the results of commands that can no longer come again
// (see DoneRetention). A result still in the outbox keeps its
// done-record however old: the coordinator has not heard it (a long WAN
// outage), so it may well send the command again, which must not run
// twice. (A deleted node's results leave the outbox with Forget, and the
// coordinator acks those of nodes it does not know.) An acked command
// older than one of its node already started goes at once: its Seq alone
// refuses a copy (Once), so an agent keeps about one done-record per
// node, not every command of the last minutes.
func (o *Outbox) Trim(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.trimLocked(now)
}

func (o *Outbox) trimLocked(now time.Time) {
	for id, d := range o.st.Done {
		if _, waiting := o.st.Items[d.ID]; waiting {
			continue
		}
		superseded := d.CmdSeq != 0 && d.CmdSeq < o.st.Latest[d.Node]
		if d.Acked.IsZero() || (!d.Acked.IsZero() && superseded) || (now.Sub(d.Acked) > DoneRetention && now.After(d.Deadline)) {
			delete(o.st.Done, id)
			o.store.Later(d.Seq, nil)
		}
	}
}

// Keep puts a relayed message into the outbox, on disk, unchanged (the
// caller publishes it), and tells whether it is there (a copy already
// there counts); false when the store is closing.
func (o *Outbox) Keep(topic string, m *protocol.Message, payload []byte) bool {
	o.mu.Lock()
	if _, ok := o.st.Items[m.ID]; ok {
		o.mu.Unlock()
		return true
	}
	o.st.Seq++
	seq := o.st.Seq
	store := o.store
	o.mu.Unlock()
	rec := &Record{ID: m.ID, Topic: topic, Payload: payload, At: o.cfg.Clock.Now()}
	if err := store.Put(seq, rec); errors.Is(err, ErrClosed) {
		return false
	} else if err != nil {
		o.log.Error("a relayed result could not be written to the state folder: it is kept in memory and sent, but a crash before the coordinator acknowledges it would lose it",
			"node", m.Node, "command", m.CommandID, "err", err)
	}
	o.mu.Lock()
	o.st.Items[m.ID] = Item{Topic: topic, Payload: payload, Sent: o.cfg.Clock.Now(), Node: m.Node, Seq: seq}
	o.noteLocked()
	o.mu.Unlock()
	return true
}

// Drop takes the message id out of the outbox if its payload is size
// bytes (one that can never be sent: it would be sent again for ever).
func (o *Outbox) Drop(id string, size int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if it, ok := o.st.Items[id]; ok && len(it.Payload) == size {
		delete(o.st.Items, id)
		if !it.MemOnly {
			o.store.Later(it.Seq, nil)
		}
		o.noteLocked()
	}
}
