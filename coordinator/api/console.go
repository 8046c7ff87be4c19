package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
)

// The node's serial console, relayed by its site (docs/console.md):
// Ironic's states/console, and this API's own WebSocket and log.

// Bounds of a console WebSocket: a frame the client sends, what one
// connection may type per second, and how long it may stay silent.
const (
	MaxConsoleFrame       = 4 << 10
	ConsoleInputPerSecond = 16 << 10
	consolePing           = 30 * time.Second
)

// ConsoleType is the console_info type of this coordinator's consoles.
const ConsoleType = "websocket"

func consoleURL(r *http.Request, uuid string) string {
	return strings.Replace(baseURL(r), "http", "ws", 1) + "/v1/nodes/" + uuid + "/console"
}

// getConsole is GET /v1/nodes/{id}/states/console: Ironic's
// console_enabled, and console_info {type, url} while it is enabled.
func (s *Server) getConsole(w http.ResponseWriter, r *http.Request) {
	var n *fsm.Node
	if s.nodeDo(w, r, func(v *fsm.Node, _ bool) error { c := *v; n = &c; return nil }) {
		if !n.ConsoleEnabled {
			writeJSON(w, 200, map[string]any{"console_enabled": false, "console_info": nil})
			return
		}
		writeJSON(w, 200, map[string]any{"console_enabled": true, "console_info": map[string]any{"type": ConsoleType, "url": consoleURL(r, n.UUID)}})
	}
}

// setConsole is PUT /v1/nodes/{id}/states/console {"enabled": bool}: 202
// with the Location of states/console, as Ironic; a node whose console
// interface is no-console fails Ironic's validation, 400.
func (s *Server) setConsole(w http.ResponseWriter, r *http.Request) {
	var body map[string]json.RawMessage
	if !decode(w, r, &body) {
		return
	}
	raw, ok := body["enabled"]
	if !ok {
		writeError(w, 400, `Missing argument: "enabled" (true or false)`)
		return
	}
	enabled, err := strconv.ParseBool(strings.Trim(string(raw), `"`))
	if err != nil {
		writeError(w, 400, fmt.Sprintf("Invalid enabled %s: it must be true or false", raw))
		return
	}
	for k := range body {
		if k != "enabled" {
			writeError(w, 400, fmt.Sprintf("Unknown argument %q: PUT states/console takes only \"enabled\"", k))
			return
		}
	}
	var driver, iface, uuid string
	if !s.nodeDo(w, r, func(n *fsm.Node, _ bool) error {
		driver, iface, uuid = n.Driver, engine.ConsoleInterfaceOf(n), n.UUID
		return nil
	}) {
		return
	}
	if iface == engine.ConsoleNone {
		writeError(w, 400, unsupported(driver, "console")+" Set the node's console_interface to one its driver has (coordinator driver show "+driver+"), then enable it.")
		return
	}
	if err := s.e.SetConsole(uuid, enabled); err != nil {
		writeErr(w, err)
		return
	}
	w.Header().Set("Location", baseURL(r)+"/v1/nodes/"+uuid+"/states/console")
	w.WriteHeader(http.StatusAccepted)
}

// consoleLog is GET /v1/nodes/{id}/console/log: the output the
// coordinator kept of the node's console (the last
// engine.ConsoleLogBytes), as text/plain.
func (s *Server) consoleLog(w http.ResponseWriter, r *http.Request) {
	var uuid string
	if !s.nodeDo(w, r, func(n *fsm.Node, _ bool) error { uuid = n.UUID; return nil }) {
		return
	}
	if len(r.URL.Query()) > 0 {
		writeError(w, 400, "GET console/log takes no query parameters")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(s.e.ConsoleLog(uuid))
}

var upgrader = websocket.Upgrader{
	ReadBufferSize: 4096, WriteBufferSize: 16 << 10,
	// gorilla's default: a request with an Origin must come from the
	// same host (the web view); clients without a browser send none.
	CheckOrigin: nil,
}

// consoleSocket is GET /v1/nodes/{id}/console, the WebSocket of
// console_info: binary or text frames from the client are typed on the
// node's console (at most MaxConsoleFrame bytes each, at most
// ConsoleInputPerSecond bytes a second); the console's output comes as
// binary frames, first what was kept, then as it arrives.
func (s *Server) consoleSocket(w http.ResponseWriter, r *http.Request) {
	var n *fsm.Node
	if !s.nodeDo(w, r, func(v *fsm.Node, _ bool) error { c := *v; n = &c; return nil }) {
		return
	}
	if !n.ConsoleEnabled {
		writeError(w, 400, fmt.Sprintf("The console of node %s is not enabled: PUT /v1/nodes/%s/states/console {\"enabled\": true} first.", n.UUID, n.UUID))
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		writeError(w, 400, "GET /v1/nodes/{id}/console is a WebSocket: connect with a WebSocket client (coordinator node console NODE)")
		return
	}
	kept, out, cancel, err := s.e.WatchConsole(n.UUID)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer cancel()
	c, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered
	}
	defer c.Close()
	c.SetReadLimit(MaxConsoleFrame)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tokens, last := float64(ConsoleInputPerSecond), time.Now()
		_ = c.SetReadDeadline(time.Now().Add(3 * consolePing))
		c.SetPongHandler(func(string) error { return c.SetReadDeadline(time.Now().Add(3 * consolePing)) })
		for {
			_, b, err := c.ReadMessage()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(3 * consolePing))
			now := time.Now()
			tokens = min(float64(ConsoleInputPerSecond), tokens+now.Sub(last).Seconds()*ConsoleInputPerSecond)
			last = now
			if tokens < float64(len(b)) {
				time.Sleep(time.Duration((float64(len(b)) - tokens) / ConsoleInputPerSecond * float64(time.Second)))
				tokens = float64(len(b))
			}
			tokens -= float64(len(b))
			if len(b) == 0 {
				continue
			}
			if err := s.e.ConsoleInput(n.UUID, b); err != nil {
				_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, clip(err.Error(), 120)), time.Now().Add(time.Second))
				return
			}
		}
	}()
	write := func(b []byte) bool {
		_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
		return c.WriteMessage(websocket.BinaryMessage, b) == nil
	}
	if len(kept) > 0 && !write(kept) {
		return
	}
	ping := time.NewTicker(consolePing)
	defer ping.Stop()
	for {
		select {
		case <-done:
			return
		case <-r.Context().Done():
			return
		case <-ping.C:
			if c.WriteControl(websocket.PingMessage, nil, time.Now().Add(10*time.Second)) != nil {
				return
			}
		case b, ok := <-out:
			if !ok {
				_ = c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseGoingAway, "console output fell behind; connect again"), time.Now().Add(time.Second))
				return
			}
			if !write(b) {
				return
			}
		}
	}
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
