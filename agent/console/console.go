// Package console relays the serial consoles of a site's nodes: it opens
// a node's console through the Dialer of the node's driver, keeps the
// last bytes it printed (in the agent's encrypted state folder, also
// while the WAN is down) and sends them to the coordinator in bounded,
// compressed chunks, after the site's commands' results and within a
// bandwidth bound; it writes what the coordinator sends as input.
package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// Target is the node whose console a Dialer opens: its driver and its
// BMC's address and credentials, from the node's driver_info.
type Target struct {
	Node     string
	Driver   string
	Address  string
	Username string
	Password string
	// DriverInfo is the node's whole driver_info (ports, interfaces).
	DriverInfo map[string]any
}

// Dialer opens a node's serial console: what the node prints is read from
// the connection, what is written to it is typed on the console. Close
// ends the console session at the BMC.
type Dialer interface {
	Dial(ctx context.Context, n Target) (io.ReadWriteCloser, error)
}

// DialerFunc is a function as a Dialer.
type DialerFunc func(ctx context.Context, n Target) (io.ReadWriteCloser, error)

// Dial calls f.
func (f DialerFunc) Dial(ctx context.Context, n Target) (io.ReadWriteCloser, error) { return f(ctx, n) }

// Dialers is the registration point: driver name → the Dialer of its
// nodes' consoles (bmc.go: IPMI Serial-over-LAN, the Redfish BMC's SSH
// serial console). A driver without one has no console at the site.
func Dialers() map[string]Dialer {
	return map[string]Dialer{
		"fake":          SimDialer{},
		"fake-hardware": SimDialer{},
		"ipmi":          SOLDialer{},
		"redfish":       SSHDialer{},
		"idrac":         SSHDialer{},
	}
}

// TargetOf is the Target of a node of driver with driver_info info:
// the address and credentials under the driver's prefix (ipmi_address,
// redfish_username, ...).
func TargetOf(node, driver string, info map[string]any) Target {
	t := Target{Node: node, Driver: driver, DriverInfo: info}
	prefix := driver
	switch driver {
	case "idrac":
		prefix = "redfish"
	case "fake", "fake-hardware", "qemu-dev":
		prefix = "fake"
	}
	str := func(k string) string { s, _ := info[prefix+"_"+k].(string); return s }
	t.Address, t.Username, t.Password = str("address"), str("username"), str("password")
	return t
}

// Store keeps each node's kept output in the agent's state folder.
type Store interface {
	PutConsole(node string, state []byte)
	LoadConsoles() (map[string][]byte, error)
}

// Defaults and bounds of Config.
const (
	DefaultKeep      = 64 << 10
	MinKeep          = 4 << 10
	MaxKeep          = 1 << 20
	DefaultBandwidth = 64 << 10
	MinBandwidth     = 4 << 10
	MaxBandwidth     = 16 << 20
	// MaxConsoles bounds the consoles open at once at a site.
	MaxConsoles = 256
)

// Config configures a Manager.
type Config struct {
	Site string
	Log  *slog.Logger
	// Keep is how many bytes of each node's output are kept (the last).
	Keep int
	// Bandwidth bounds the bytes per second of console output the site
	// sends (before compression).
	Bandwidth int
	// Publish sends one message to the coordinator on the WAN link and
	// returns once the broker took it (an error: it is sent again later).
	Publish func(ctx context.Context, topic string, payload []byte) error
	// Busy tells whether results and reports wait to be sent: console
	// output waits for them.
	Busy func() bool
	// Yield tells whether results and reports are on the way (published,
	// not yet acknowledged by the broker): the consoles not typed into
	// then keep at most YieldUntyped chunks on the way, so that few
	// console bytes are ahead of results on the site's one connection.
	Yield func() bool
	// Store keeps the output (nil: memory only, tests).
	Store Store
	// Dialers by driver (nil: Dialers()).
	Dialers map[string]Dialer
}

// CheckConfig refuses bounds out of range.
func CheckConfig(keep, bandwidth int) error {
	if keep < MinKeep || keep > MaxKeep {
		return fmt.Errorf("--console-keep %d is out of range: give %d to %d bytes", keep, MinKeep, MaxKeep)
	}
	if bandwidth < MinBandwidth || bandwidth > MaxBandwidth {
		return fmt.Errorf("--console-bandwidth %d is out of range: give %d to %d bytes per second", bandwidth, MinBandwidth, MaxBandwidth)
	}
	return nil
}

// kept is one node's kept output: the last len(Data) bytes of its
// console stream, which ends at offset End; Sent is the offset up to
// which the coordinator has it.
type kept struct {
	Data    []byte `json:"data"`
	End     uint64 `json:"end"`
	Sent    uint64 `json:"sent"`
	Enabled bool   `json:"enabled"`
	Driver  string `json:"driver,omitempty"`
	Closed  bool   `json:"closed,omitempty"` // a closed notice is due
	Error   string `json:"error,omitempty"`  // an error notice is due
	dirty   bool
	// The node's chunks on the way (not kept in the state folder):
	// flights are the chunks sent from Sent up to next, in order, acked
	// or not; at most NodeWindow of them (TypedWindow while typed into),
	// and as many publishes of the node not returned (onWay, which also
	// counts those of flights a rewind dropped).
	next    uint64
	flights []*flight
	onWay   int
	// failed: a publish of a flight failed; no new chunk goes until
	// onWay is 0, then the node starts again from Sent.
	failed bool
	// replay: the next chunk is the first of a replay (Lost = Offset).
	replay bool
	// noticeOut: a chunk carrying the due notice is on the way.
	noticeOut bool
}

// flight is a chunk of a node's output on the way: bytes from to to;
// notice when it carries the node's notice (errText, closed).
type flight struct {
	from, to uint64
	acked    bool
	notice   bool
	errText  string
	closed   bool
}

// rewind drops the node's flights: its next chunk starts at Sent (what
// the broker acked in order; the coordinator ignores what it has).
func (k *kept) rewind() {
	k.flights, k.next, k.failed, k.noticeOut = nil, k.Sent, false, false
}

// resend has everything kept sent again, the first chunk saying that
// nothing older will come (the coordinator's replay, its enable again).
func (k *kept) resend() {
	k.Sent = k.start()
	k.rewind()
	k.replay = true
}

func (k *kept) start() uint64 { return k.End - uint64(len(k.Data)) }

// session is an open console.
type session struct {
	conn   io.ReadWriteCloser
	cancel context.CancelFunc
}

// Manager holds a site's consoles.
type Manager struct {
	cfg      Config
	mu       sync.Mutex
	kept     map[string]*kept
	sessions map[string]*session
	wake     chan struct{}
	ctx      context.Context
	// last is the node whose output went last: the next turn is the
	// node after it (round robin over the nodes with output due).
	last string
	// typed is when each node's console last had input: a console being
	// typed into has its output sent first (its echo is what the
	// operator waits for), before the round robin of the others.
	typed map[string]time.Time
	// sending counts the chunks being published (at most MaxSending);
	// sendingUntyped those of them of consoles not typed into when they
	// went (at most MaxSending - TypedReserve).
	sending, sendingUntyped int
}

// typedFirst is how long after its last input a console's output goes
// before the round robin's.
const typedFirst = 3 * time.Second

// MaxSending bounds the console chunks being published at once (each
// awaits the broker's ack, a WAN round trip): consoles of different
// nodes do not wait for each other's round trips, and the site's
// results, which take their own turns on the same link, never find the
// link's in-flight window taken by consoles.
const MaxSending = 32

// TypedReserve is the share of MaxSending that only consoles typed into
// in the last typedFirst use: the other consoles have at most
// MaxSending - TypedReserve chunks on the way. However many consoles
// print, a typed key's echo finds a free place at once and goes: it
// never waits for the acks of the printing consoles' chunks (a second
// round trip). Typed consoles may use the whole window.
const TypedReserve = 8

// YieldUntyped is how many chunks the consoles not typed into keep on
// the way while results are (Config.Yield): they go on printing, a few
// chunks a round trip, instead of filling the connection ahead of the
// results (docs/benchmarks.md, "The serial console").
const YieldUntyped = 4

// NodeWindow bounds the chunks of one node on the way at once: new
// output (a typed key's echo) goes while the node's previous chunks
// await their acks, so it arrives one round trip after it was printed,
// not after the previous chunks' round trips too. Chunks may arrive out
// of order; each carries its offset and the coordinator puts them in
// order (coordinator/engine consolestream.go). A failed publish stops
// the node's new chunks until its others have returned, then the node
// sends again from the first byte the broker did not ack.
const NodeWindow = 4

// TypedWindow is NodeWindow of a console typed into in the last
// typedFirst: its echo goes at once also while it prints without pause
// (up to TypedWindow chunks a round trip).
const TypedWindow = 16

// New returns a Manager with what the store kept.
func New(cfg Config) (*Manager, error) {
	if cfg.Keep == 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Bandwidth == 0 {
		cfg.Bandwidth = DefaultBandwidth
	}
	if err := CheckConfig(cfg.Keep, cfg.Bandwidth); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Dialers == nil {
		cfg.Dialers = Dialers()
	}
	if cfg.Yield == nil {
		cfg.Yield = func() bool { return false }
	}
	if cfg.Busy == nil {
		cfg.Busy = func() bool { return false }
	}
	m := &Manager{cfg: cfg, kept: map[string]*kept{}, sessions: map[string]*session{}, wake: make(chan struct{}, 1), ctx: context.Background(),
		typed: map[string]time.Time{}}
	if cfg.Store != nil {
		all, err := cfg.Store.LoadConsoles()
		if err != nil {
			return nil, fmt.Errorf("console output kept in the state folder: %w", err)
		}
		for node, b := range all {
			var k kept
			if json.Unmarshal(b, &k) != nil || len(k.Data) > cfg.Keep || uint64(len(k.Data)) > k.End {
				continue
			}
			k.Enabled = false // reopened by the coordinator's enable
			k.next = k.Sent
			m.kept[node] = &k
		}
	}
	return m, nil
}

// Run sends output and writes the kept output to the store until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	m.mu.Lock()
	m.ctx = ctx
	m.mu.Unlock()
	flush := time.NewTicker(500 * time.Millisecond)
	defer flush.Stop()
	go m.sendLoop(ctx)
	for {
		select {
		case <-ctx.Done():
			m.flush()
			m.CloseAll()
			return
		case <-flush.C:
			m.flush()
		}
	}
}

func (m *Manager) flush() {
	if m.cfg.Store == nil {
		return
	}
	m.mu.Lock()
	var puts []struct {
		node string
		b    []byte
	}
	for node, k := range m.kept {
		if k.dirty {
			k.dirty = false
			b, _ := json.Marshal(k)
			puts = append(puts, struct {
				node string
				b    []byte
			}{node, b})
		}
	}
	m.mu.Unlock()
	for _, p := range puts {
		m.cfg.Store.PutConsole(p.node, p.b)
	}
}

func (m *Manager) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Handle takes a console command from the coordinator.
func (m *Manager) Handle(msg *protocol.Message) {
	switch msg.Action {
	case protocol.ConsoleEnable:
		m.enable(msg.Node, TargetOf(msg.Node, msg.Driver, msg.DriverInfo))
	case protocol.ConsoleDisable:
		m.disable(msg.Node)
	case protocol.ConsoleInput:
		m.input(msg.Node, msg.Console.Input)
	case protocol.ConsoleReplay:
		m.mu.Lock()
		if k := m.kept[msg.Node]; k != nil {
			k.resend()
		}
		m.mu.Unlock()
		m.poke()
	}
}

func (m *Manager) enable(node string, t Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.kept[node]
	if k == nil {
		k = &kept{}
		m.kept[node] = k
	}
	k.Enabled, k.Driver, k.dirty = true, t.Driver, true
	if _, open := m.sessions[node]; open {
		// Enabled again (a replay after the coordinator's restart):
		// the coordinator may lack what it had.
		k.resend()
		m.poke()
		return
	}
	d := m.cfg.Dialers[t.Driver]
	if d == nil {
		k.Error = fmt.Sprintf("the edge agent has no console for driver %s (no Dialer registered)", t.Driver)
		k.Enabled = false
		m.poke()
		return
	}
	if len(m.sessions) >= MaxConsoles {
		k.Error = fmt.Sprintf("the site has %d consoles open, the most it holds; disable another node's console first", MaxConsoles)
		k.Enabled = false
		m.poke()
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	s := &session{cancel: cancel}
	m.sessions[node] = s
	k.Error, k.Closed = "", false
	go m.pump(ctx, node, t, d, s)
}

// pump opens the console and reads it until it ends.
func (m *Manager) pump(ctx context.Context, node string, t Target, d Dialer, s *session) {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, err := d.Dial(dctx, t)
	cancel()
	m.mu.Lock()
	if err != nil || ctx.Err() != nil {
		if conn != nil {
			conn.Close()
		}
		if m.sessions[node] == s {
			delete(m.sessions, node)
			if k := m.kept[node]; k != nil && err != nil {
				k.Error = fmt.Sprintf("cannot open the console of node %s: %v", node, err)
				k.Enabled, k.dirty = false, true
			}
		}
		m.mu.Unlock()
		m.poke()
		return
	}
	s.conn = conn
	m.mu.Unlock()
	go func() { <-ctx.Done(); conn.Close() }()
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			m.append(node, buf[:n])
		}
		if err != nil {
			break
		}
	}
	m.mu.Lock()
	if m.sessions[node] == s {
		delete(m.sessions, node)
		if k := m.kept[node]; k != nil {
			k.Closed, k.Enabled, k.dirty = true, false, true
			if ctx.Err() == nil {
				k.Error = fmt.Sprintf("the console connection of node %s ended", node)
			}
		}
	}
	m.mu.Unlock()
	m.poke()
}

// append keeps b at the end of node's output, dropping the oldest bytes
// past the bound.
func (m *Manager) append(node string, b []byte) {
	m.mu.Lock()
	k := m.kept[node]
	if k == nil {
		k = &kept{}
		m.kept[node] = k
	}
	k.Data = append(k.Data, b...)
	if over := len(k.Data) - m.cfg.Keep; over > 0 {
		k.Data = append(k.Data[:0:0], k.Data[over:]...)
	}
	k.End += uint64(len(b))
	k.dirty = true
	m.mu.Unlock()
	m.poke()
}

func (m *Manager) disable(node string) {
	m.mu.Lock()
	s := m.sessions[node]
	delete(m.sessions, node)
	if k := m.kept[node]; k != nil {
		k.Enabled, k.Closed, k.dirty = false, true, true
	}
	m.mu.Unlock()
	if s != nil {
		s.cancel()
	}
	m.poke()
}

func (m *Manager) input(node string, b []byte) {
	m.mu.Lock()
	s := m.sessions[node]
	m.mu.Unlock()
	m.noteTyped(node)
	if s == nil || s.conn == nil {
		m.cfg.Log.Debug("console input for a console not open", "node", node)
		return
	}
	if _, err := s.conn.Write(b); err != nil {
		m.cfg.Log.Warn("console input not written", "node", node, "err", err)
	}
}

// noteTyped gives node's output the first turns for typedFirst: its
// console is being typed into.
func (m *Manager) noteTyped(node string) {
	m.mu.Lock()
	m.typed[node] = time.Now()
	m.mu.Unlock()
	m.poke()
}

// Forget drops a deleted node's console and kept output.
func (m *Manager) Forget(node string) {
	m.disable(node)
	m.mu.Lock()
	delete(m.kept, node)
	delete(m.typed, node)
	m.mu.Unlock()
	if m.cfg.Store != nil {
		m.cfg.Store.PutConsole(node, nil)
	}
}

// CloseAll closes every console (the agent stops).
func (m *Manager) CloseAll() {
	m.mu.Lock()
	ss := m.sessions
	m.sessions = map[string]*session{}
	m.mu.Unlock()
	for _, s := range ss {
		s.cancel()
	}
}

// Kept returns a copy of node's kept output and the offset of its end.
func (m *Manager) Kept(node string) ([]byte, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := m.kept[node]
	if k == nil {
		return nil, 0
	}
	return append([]byte(nil), k.Data...), k.End
}

// next is the next chunk due, if it fits in tokens bytes: the oldest
// output of a node not yet on the way (its chunks on the way fewer than
// NodeWindow, TypedWindow for a console typed into lately), or a
// notice; consoles typed into lately first, then the node after the one
// that went last. The site's window holds MaxSending chunks, of which
// the consoles not typed into take at most MaxSending - TypedReserve,
// YieldUntyped while yield (results on the way).
// ok false when nothing goes now:
// wait > 0 when the chunk due does not fit in tokens (the time its bytes
// take at the bandwidth). settle takes its publish's result; the chunk
// is on the way until done is called.
func (m *Manager) next(tokens float64, yield bool) (node string, msg *protocol.Message, raw int, wait time.Duration, settle func(error), done func(), ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.sending >= MaxSending {
		return "", nil, 0, 0, nil, nil, false
	}
	// Consoles typed into lately first, then the round robin of the
	// others (while their share of the window has room).
	order := make([]string, 0, len(m.kept))
	now := time.Now()
	for n, at := range m.typed {
		if now.Sub(at) > typedFirst {
			delete(m.typed, n)
			continue
		}
		// A console typed into before it printed anything keeps its
		// mark for typedFirst too: a look before its echo comes must
		// not drop it (Forget drops a deleted node's).
		if m.kept[n] != nil {
			order = append(order, n)
		}
	}
	sort.Strings(order)
	hot := len(order)
	untyped := MaxSending - TypedReserve
	if yield {
		untyped = YieldUntyped
	}
	if m.sendingUntyped < untyped {
		nodes := make([]string, 0, len(m.kept))
		for n := range m.kept {
			if _, typed := m.typed[n]; !typed {
				nodes = append(nodes, n)
			}
		}
		sort.Strings(nodes)
		// Round robin from the node after the last sent.
		first := sort.SearchStrings(nodes, m.last)
		if first < len(nodes) && nodes[first] == m.last {
			first++
		}
		for i := range nodes {
			order = append(order, nodes[(first+i)%len(nodes)])
		}
	}
	for i, n := range order {
		typed := i < hot
		k := m.kept[n]
		window := NodeWindow
		if typed {
			window = TypedWindow
		}
		if k.failed || len(k.flights) >= window || k.onWay >= window {
			continue
		}
		k.next = max(k.next, k.Sent)
		from, lostFrom := k.next, k.next
		if from < k.start() {
			from = k.start() // dropped past the bound before it could go
		}
		notice := (k.Closed || k.Error != "") && !k.noticeOut
		if from >= k.End && !notice {
			continue
		}
		chunk := k.Data[from-k.start():]
		// A chunk fits the bandwidth's tokens, which hold a second's.
		if most := min(protocol.MaxConsoleChunk, m.cfg.Bandwidth); len(chunk) > most {
			chunk = chunk[:most]
		}
		if need := float64(len(chunk)) - tokens; need > 0 {
			return "", nil, 0, time.Duration(need / float64(m.cfg.Bandwidth) * float64(time.Second)), nil, nil, false
		}
		to := from + uint64(len(chunk))
		c := &protocol.ConsoleData{Offset: from, Lost: from - lostFrom}
		if k.replay {
			c.Lost = from
		}
		if len(chunk) > 0 {
			c.Output = protocol.DeflateConsole(chunk)
		}
		f := &flight{from: from, to: to}
		if to == k.End && notice {
			f.notice, f.errText, f.closed = true, k.Error, k.Closed
			c.Error, c.Closed = k.Error, k.Closed
			k.noticeOut = true
		}
		if !typed {
			m.last = n // a typed console's turn leaves the round robin's where it was
			m.sendingUntyped++
		}
		m.sending++
		k.flights = append(k.flights, f)
		k.next, k.replay = to, false
		k.onWay++
		msg := &protocol.Message{Kind: protocol.KindConsoleOutput, ID: fmt.Sprintf("console-%s-%d", n, to),
			Site: m.cfg.Site, Node: n, Sent: time.Now().UTC(), Console: c}
		return n, msg, len(chunk), 0, func(err error) { m.settle(k, f, err) }, func() { m.done(k, typed) }, true
	}
	return "", nil, 0, 0, nil, nil, false
}

// settle takes the result of flight f's publish: acked, the node's Sent
// moves over the flights acked in order; failed, the node sends nothing
// new, and again from Sent once its publishes have returned (done).
func (m *Manager) settle(k *kept, f *flight, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	current := false
	for _, g := range k.flights {
		current = current || g == f
	}
	switch {
	case !current:
		// Dropped by a rewind (a replay, a failure): sent again.
	case err != nil:
		k.failed = true
	default:
		f.acked = true
		if f.notice {
			if k.Error == f.errText {
				k.Error = ""
			}
			if f.closed {
				k.Closed = false
			}
			k.noticeOut = false
		}
		for len(k.flights) > 0 && k.flights[0].acked {
			k.Sent = max(k.Sent, k.flights[0].to)
			k.flights = k.flights[1:]
		}
		k.dirty = true
	}
}

// done: a publish of the node's has returned (typed: it went as a
// typed console's); its place in the site's window is free.
func (m *Manager) done(k *kept, typed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sending--
	if !typed {
		m.sendingUntyped--
	}
	k.onWay--
	if k.failed && k.onWay == 0 {
		k.rewind()
	}
}

// sendLoop sends what is due: after the site's queued results (Busy),
// at most Bandwidth bytes a second, up to MaxSending chunks on the way
// at once (at most NodeWindow of one node; TypedReserve of them only for
// consoles typed into), again after a failed publish.
func (m *Manager) sendLoop(ctx context.Context) {
	tokens := float64(m.cfg.Bandwidth)
	last := time.Now()
	for ctx.Err() == nil {
		for m.cfg.Busy() && ctx.Err() == nil {
			sleep(ctx, 20*time.Millisecond)
		}
		now := time.Now()
		tokens = min(float64(m.cfg.Bandwidth), tokens+now.Sub(last).Seconds()*float64(m.cfg.Bandwidth))
		last = now
		yield := m.cfg.Yield()
		node, msg, raw, wait, settle, done, ok := m.next(tokens, yield)
		if !ok {
			// Nothing goes now: the window is full, nothing is due, or
			// the chunk due waits for the bandwidth. New output (a
			// typed key's echo, which goes first and is small) or a
			// free place in the window has next look again at once.
			var timer *time.Timer
			var timeout <-chan time.Time
			if wait == 0 && yield {
				// Held back for results on the way: look again when
				// they may have gone (or a chunk settles, a key comes).
				wait = 20 * time.Millisecond
			}
			if wait > 0 {
				timer = time.NewTimer(wait)
				timeout = timer.C
			}
			select {
			case <-ctx.Done():
			case <-m.wake:
			case <-timeout:
			}
			if timer != nil {
				timer.Stop()
			}
			continue
		}
		tokens -= float64(raw)
		go func() {
			b, err := protocol.Encode(msg)
			if err != nil {
				m.cfg.Log.Warn("console output not encoded", "node", node, "err", err)
			} else {
				pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err = m.cfg.Publish(pctx, protocol.ConsoleEvtTopic(m.cfg.Site), b)
				cancel()
				if err != nil && !errors.Is(err, context.Canceled) {
					m.cfg.Log.Debug("console output not sent; kept at the site, sent again", "node", node, "err", err)
				}
			}
			settle(err)
			if err != nil {
				// The node's turn comes again after a pause.
				sleep(ctx, time.Second)
			}
			done()
			m.poke()
		}()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
