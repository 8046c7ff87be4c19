package engine

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/protocol"
)

// The serial consoles of the nodes, relayed by their sites
// (docs/console.md). The coordinator keeps the last ConsoleLogBytes of
// each enabled node's output in memory (the site keeps its own, which it
// sends again when asked: enable, and the site's return), hands new
// output to the watchers (the WebSockets), and sends what they type.

// ConsoleLogBytes bounds the output kept per node; MaxConsoleWatchers
// the watchers of one node.
const (
	ConsoleLogBytes    = 256 << 10
	MaxConsoleWatchers = 16
)

// ConsoleNone is the console interface of a node without a console.
const ConsoleNone = "no-console"

// ConsoleGapWait is how long a gap in a node's output (chunks after it
// came, the one before did not) waits before the coordinator asks the
// site for its kept output again; after ConsoleGapAsks such asks (time
// counted while the site is online, and a gap that shrinks starts over)
// the gap is shown as lost.
const (
	ConsoleGapWait = 15 * time.Second
	ConsoleGapAsks = 2
)

type consoleLog struct {
	data     []byte
	stream   consoleStream // the output chunks in order (consolestream.go)
	watchers map[chan []byte]struct{}
	// The gap check, while chunks wait behind a gap.
	gap     *time.Timer
	gapGen  int    // the check that is current
	gapEnd  uint64 // the stream's end at the last check
	gapAsks int    // replays asked for since the gap last shrank
}

// deliver keeps fresh output and hands it to the watchers.
func (l *consoleLog) deliver(fresh []byte) {
	if len(fresh) == 0 {
		return
	}
	l.data = append(l.data, fresh...)
	if over := len(l.data) - ConsoleLogBytes; over > 0 {
		l.data = append(l.data[:0:0], l.data[over:]...)
	}
	for c := range l.watchers {
		select {
		case c <- fresh:
		default:
			delete(l.watchers, c)
			close(c)
		}
	}
}

type consoleHub struct {
	mu      sync.Mutex
	logs    map[string]*consoleLog
	out     chan consoleOut
	gapWait time.Duration // ConsoleGapWait; tests shorten it
	sending sync.Once     // starts consoleSender
}

type consoleOut struct {
	topic string
	msg   *protocol.Message
}

func newConsoleHub() *consoleHub {
	return &consoleHub{logs: map[string]*consoleLog{}, out: make(chan consoleOut, 256), gapWait: ConsoleGapWait}
}

// consoles is the hub, its sender started on first use.
func (e *Engine) consoles() *consoleHub {
	e.cons.sending.Do(func() { go e.consoleSender() })
	return e.cons
}

// consoleSender publishes console commands in order (input must reach
// the node in the order typed), apart from the commands' queue.
func (e *Engine) consoleSender() {
	for o := range e.cons.out {
		b, err := protocol.Encode(e.termed(o.msg))
		if err != nil {
			e.cfg.Log.Warn("console command not encoded", "err", err)
			continue
		}
		for e.run.pub == nil {
			time.Sleep(50 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := e.run.pub.Publish(ctx, o.topic, b, false); err != nil {
			e.cfg.Log.Debug("console command not sent", "topic", o.topic, "err", err)
		}
		cancel()
	}
}

func (e *Engine) sendConsole(n *fsm.Node, action string, data *protocol.ConsoleData) error {
	msg := &protocol.Message{V: protocol.Version, Kind: protocol.KindConsole, ID: randomHex(), Site: n.Site, Node: n.UUID,
		Sent: e.cfg.Clock.Now(), Action: action, Console: data}
	if action == protocol.ConsoleEnable {
		msg.Driver, msg.DriverInfo = n.Driver, n.DriverInfo
	}
	select {
	case e.consoles().out <- consoleOut{topic: protocol.ConsoleCmdTopic(n.Site), msg: msg}:
		return nil
	default:
		return errorf(Conflict, "the coordinator's console queue is full; try again in a moment")
	}
}

// ConsoleInterfaceOf is node n's console interface.
func ConsoleInterfaceOf(n *fsm.Node) string {
	if n.ConsoleInterface == "" {
		return ConsoleNone
	}
	return n.ConsoleInterface
}

// SetConsole enables or disables a node's console (Ironic's
// set_console_mode): the node's console_enabled is set and the site is
// told. A node whose console interface is no-console is Invalid.
func (e *Engine) SetConsole(ident string, enabled bool) error {
	var send *fsm.Node
	err := e.do(func(t *tx) error {
		n, err := e.lookup(ident)
		if err != nil {
			return err
		}
		if ConsoleInterfaceOf(n) == ConsoleNone {
			return errorf(Invalid, "Node %s has console_interface no-console: it has no console. Set its console_interface (e.g. fake for driver fake, ipmitool-socat for ipmi) first.", n.UUID)
		}
		if n.ConsoleEnabled != enabled {
			n.ConsoleEnabled = enabled
			n.UpdatedAt = t.now
			t.forget(n.UUID)
			t.dirty[n.UUID] = n
			word := "disabled"
			if enabled {
				word = "enabled"
			}
			t.addHistory(n, fsm.HistoryEntry{Time: t.now, Severity: "INFO", Event: "Console " + word, EventType: "console"})
		}
		c := *n
		send = &c
		return nil
	})
	if err != nil {
		return err
	}
	if enabled {
		return e.sendConsole(send, protocol.ConsoleEnable, nil)
	}
	return e.sendConsole(send, protocol.ConsoleDisable, nil)
}

// ConsoleInput sends what was typed on a node's enabled console.
func (e *Engine) ConsoleInput(uuid string, b []byte) error {
	n := e.views.get(uuid)
	if n == nil {
		return errorf(NotFound, "Node %s could not be found.", uuid)
	}
	if !n.ConsoleEnabled {
		return errorf(Invalid, "The console of node %s is not enabled.", uuid)
	}
	for len(b) > 0 {
		c := b[:min(len(b), protocol.MaxConsoleInput)]
		b = b[len(c):]
		if err := e.sendConsole(n, protocol.ConsoleInput, &protocol.ConsoleData{Input: c}); err != nil {
			return err
		}
	}
	return nil
}

// ConsoleLog is the output kept of a node's console.
func (e *Engine) ConsoleLog(uuid string) []byte {
	h := e.consoles()
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.logs[uuid]; l != nil {
		return append([]byte(nil), l.data...)
	}
	return nil
}

// WatchConsole gives what the node's console prints from now on (after
// the output kept, which it returns); cancel ends the watch. A watcher
// too slow to take its output loses it (its channel is closed).
func (e *Engine) WatchConsole(uuid string) (kept []byte, ch <-chan []byte, cancel func(), err error) {
	h := e.consoles()
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.logs[uuid]
	if l == nil {
		l = &consoleLog{watchers: map[chan []byte]struct{}{}}
		h.logs[uuid] = l
	}
	if len(l.watchers) >= MaxConsoleWatchers {
		return nil, nil, nil, errorf(Conflict, "node %s has %d console watchers, the most it takes; close another first", uuid, MaxConsoleWatchers)
	}
	c := make(chan []byte, 256)
	l.watchers[c] = struct{}{}
	return append([]byte(nil), l.data...), c, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if _, ok := l.watchers[c]; ok {
			delete(l.watchers, c)
			close(c)
		}
	}, nil
}

// handleConsoleOutput takes a chunk of a node's console output from its
// site.
func (e *Engine) handleConsoleOutput(site string, msg *protocol.Message) {
	if msg.Kind != protocol.KindConsoleOutput {
		return
	}
	n := e.views.get(msg.Node)
	if n == nil || n.Site != site || n.UUID != msg.Node {
		e.rejects.Warn("message rejected", "message rejected", "site", site, "reason", fmt.Sprintf("console output of node %q, which is not a node of site %s", msg.Node, site))
		return
	}
	out, err := protocol.InflateConsole(msg.Console.Output)
	if err != nil {
		e.rejects.Warn("message rejected", "message rejected", "site", site, "reason", err)
		return
	}
	h := e.consoles()
	h.mu.Lock()
	l := h.logs[n.UUID]
	if l == nil {
		l = &consoleLog{watchers: map[chan []byte]struct{}{}}
		h.logs[n.UUID] = l
	}
	l.deliver(l.stream.add(msg.Console.Offset, msg.Console.Lost, out))
	switch waiting := l.stream.waiting(); {
	case waiting && l.gap == nil:
		// A gap: the chunks before it are on the way, or sent again
		// after a failed publish; it is checked every gapWait.
		l.gapGen++
		l.gapEnd, l.gapAsks = l.stream.end, 0
		uuid, gen := n.UUID, l.gapGen
		l.gap = time.AfterFunc(h.gapWait, func() { e.consoleGapCheck(uuid, gen) })
	case !waiting && l.gap != nil:
		l.gap.Stop()
		l.gap = nil
		l.gapGen++
	}
	h.mu.Unlock()
	if msg.Console.Error != "" && n.ConsoleEnabled {
		errText := fsm.BoundText(msg.Console.Error, fsm.MaxRemoteText)
		_ = e.do(func(t *tx) error {
			n, err := e.lookup(msg.Node)
			if err != nil || !n.ConsoleEnabled {
				return nil
			}
			// As Ironic's console failures: console_enabled false, the
			// reason in last_error.
			n.ConsoleEnabled = false
			n.LastError = errText
			n.UpdatedAt = t.now
			t.forget(n.UUID)
			t.dirty[n.UUID] = n
			t.addHistory(n, fsm.HistoryEntry{Time: t.now, Severity: "ERROR", Event: "Console failed: " + errText, EventType: "console"})
			return nil
		})
	}
}

// consoleGapCheck looks again at a gap in node uuid's output (the check
// gen): filled, it ends; shrunk, it waits again; otherwise, while the
// site is online, the site is asked for its kept output again
// (ConsoleGapAsks times), then the gap is shown as lost.
func (e *Engine) consoleGapCheck(uuid string, gen int) {
	h := e.consoles()
	n := e.views.get(uuid)
	online := n != nil && e.SiteOnline(n.Site)
	h.mu.Lock()
	l := h.logs[uuid]
	if l == nil || l.gapGen != gen || l.gap == nil {
		h.mu.Unlock()
		return
	}
	ask := false
	switch {
	case !l.stream.waiting() || n == nil:
		l.gap = nil
	case l.stream.end != l.gapEnd:
		l.gapEnd, l.gapAsks = l.stream.end, 0
		l.gap.Reset(h.gapWait)
	case !online:
		l.gap.Reset(h.gapWait) // the site cannot send it now: not counted
	case l.gapAsks < ConsoleGapAsks:
		l.gapAsks++
		ask = true
		l.gap.Reset(h.gapWait)
	default:
		e.cfg.Log.Warn("console output of a node has a gap the site did not fill; shown as lost", "node", uuid)
		l.deliver(l.stream.giveUp())
		l.gap = nil
	}
	h.mu.Unlock()
	if ask {
		if err := e.sendConsole(n, protocol.ConsoleReplay, nil); err != nil {
			e.cfg.Log.Debug("console replay not asked", "node", uuid, "err", err)
		}
	}
}

// consoleSiteBack asks a returned site for the consoles enabled there:
// it opens them again if it had to, and sends what it kept.
func (e *Engine) consoleSiteBack(site string) {
	var ns []*fsm.Node
	e.Each(func(n *fsm.Node) bool {
		if n.Site == site && n.ConsoleEnabled {
			c := *n
			ns = append(ns, &c)
		}
		return true
	})
	for _, n := range ns {
		_ = e.sendConsole(n, protocol.ConsoleEnable, nil)
	}
}

// dropConsole forgets a deleted node's console output.
func (e *Engine) dropConsole(uuid string) {
	h := e.consoles()
	h.mu.Lock()
	defer h.mu.Unlock()
	if l := h.logs[uuid]; l != nil {
		for c := range l.watchers {
			close(c)
		}
		if l.gap != nil {
			l.gap.Stop()
		}
		delete(h.logs, uuid)
	}
}
