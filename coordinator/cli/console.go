package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// node console, console-enable and console-disable: the node's serial
// console, relayed by its site (docs/console.md).

const consoleLong = `Attaches the terminal to the node's serial console, relayed by its site's edge agent
(its console must be enabled: coordinator node console-enable NODE). What the console
printed before (what the coordinator kept) comes first, then what it prints; what you type
goes to the node. Type ~. at the start of a line to leave (~~ sends a ~).
With --log, prints the output the coordinator kept of the node's console and exits.`

// consoleInterfaceUsage is the help of --console-interface.
const consoleInterfaceUsage = "the node's serial console: no-console (the default), ipmitool-socat (ipmi, redfish: IPMI Serial-over-LAN), redfish-serial-ssh (redfish: the BMC's SSH serial console), fake (fake: the simulated console); docs/console.md"

// consoleEscape is what leaves the console, typed after a newline.
const consoleEscape = "~."

func (c *cmd) nodeConsole() *cobra.Command {
	var logOnly bool
	cc := c.nodeArg("console NODE", "Attach to a node's serial console (~. to leave), or print its recorded output (--log)", func(cl *client, id string) error {
		if logOnly {
			return cl.stream("GET", nodePath(id, "/console/log"), c.out)
		}
		return c.consoleAttach(cl, id)
	})
	cc.Flags().BoolVar(&logOnly, "log", false, "print the console output the coordinator kept and exit")
	cc.Long = consoleLong
	cc.Example = "  coordinator node console-enable n1\n  coordinator node console n1\n  coordinator node console n1 --log"
	return cc
}

func (c *cmd) nodeConsoleSet(enable bool) *cobra.Command {
	use, short := "console-disable NODE", "Disable a node's serial console (the site closes it)"
	if enable {
		use, short = "console-enable NODE", "Enable a node's serial console: its site opens it and keeps its output"
	}
	return c.nodeArg(use, short, func(cl *client, id string) error {
		if _, _, err := cl.do("PUT", nodePath(id, "/states/console"), map[string]any{"enabled": enable}, nil); err != nil {
			return err
		}
		word := "disabled"
		if enable {
			word = "enabled"
		}
		fmt.Fprintf(c.out, "Console of node %s %s.\n", id, word)
		return nil
	})
}

// stream copies the body of a GET to w.
func (cl *client) stream(method, path string, w io.Writer) error {
	req, err := http.NewRequestWithContext(cl.ctx, method, cl.base+path, nil)
	if err != nil {
		return fmt.Errorf("bad coordinator URL %q: %w", cl.base, err)
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	if cl.user != "" {
		req.SetBasicAuth(cl.user, cl.password)
	}
	resp, err := cl.http.Do(req)
	if err != nil {
		return cl.transportError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return &apiError{Status: resp.StatusCode, Msg: errorText(b, resp.Status)}
	}
	_, err = io.Copy(w, resp.Body)
	return err
}

func (c *cmd) consoleAttach(cl *client, id string) error {
	var st struct {
		Enabled bool `json:"console_enabled"`
	}
	if _, _, err := cl.do("GET", nodePath(id, "/states/console"), nil, &st); err != nil {
		return err
	}
	if !st.Enabled {
		return fmt.Errorf("the console of node %s is not enabled: run coordinator node console-enable %s first", id, id)
	}
	u := "ws" + strings.TrimPrefix(cl.base, "http") + nodePath(id, "/console")
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, Proxy: http.ProxyFromEnvironment}
	if t, ok := cl.http.Transport.(*http.Transport); ok && t.TLSClientConfig != nil {
		d.TLSClientConfig = t.TLSClientConfig.Clone()
	}
	h := http.Header{}
	if cl.user != "" {
		req, _ := http.NewRequest("GET", "http://x", nil)
		req.SetBasicAuth(cl.user, cl.password)
		h.Set("Authorization", req.Header.Get("Authorization"))
	}
	ws, resp, err := d.DialContext(cl.ctx, u, h)
	if err != nil {
		if resp != nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			return &apiError{Status: resp.StatusCode, Msg: errorText(b, resp.Status)}
		}
		return cl.transportError(err)
	}
	defer ws.Close()
	in := c.stdin
	if f, ok := in.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		old, err := term.MakeRaw(int(f.Fd()))
		if err != nil {
			return fmt.Errorf("cannot put the terminal in raw mode: %w", err)
		}
		defer term.Restore(int(f.Fd()), old)
	}
	fmt.Fprintf(c.err, "Connected to the console of node %s. Type %s at the start of a line to leave.\r\n", id, consoleEscape)
	errc := make(chan error, 2)
	go func() {
		for {
			_, b, err := ws.ReadMessage()
			if err != nil {
				var ce *websocket.CloseError
				if errors.As(err, &ce) && ce.Text != "" {
					errc <- fmt.Errorf("the coordinator closed the console: %s", ce.Text)
				} else {
					errc <- nil
				}
				return
			}
			if _, err := c.out.Write(b); err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() {
		esc := &escaper{line: true}
		buf := make([]byte, 1024)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				send, leave := esc.feed(buf[:n])
				if len(send) > 0 {
					if werr := ws.WriteMessage(websocket.BinaryMessage, send); werr != nil {
						errc <- nil
						return
					}
				}
				if leave {
					errc <- nil
					return
				}
			}
			if err != nil {
				// Input ended (not a terminal): leave once the output
				// had a moment to arrive.
				time.Sleep(2 * time.Second)
				errc <- nil
				return
			}
		}
	}()
	var err2 error
	select {
	case err2 = <-errc:
	case <-cl.ctx.Done():
	}
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	fmt.Fprintf(c.err, "\r\nLeft the console of node %s.\r\n", id)
	return err2
}

// escaper finds the escape ~. typed at the start of a line.
type escaper struct {
	line    bool // at the start of a line
	pending bool // a ~ was typed at the start of a line
}

// feed returns what to send of b, and whether the escape was typed.
func (e *escaper) feed(b []byte) ([]byte, bool) {
	var out bytes.Buffer
	for _, ch := range b {
		if e.pending {
			e.pending = false
			switch ch {
			case '.':
				return out.Bytes(), true
			case '~':
				out.WriteByte('~')
				e.line = false
				continue
			default:
				out.WriteByte('~')
			}
		} else if e.line && ch == '~' {
			e.pending = true
			continue
		}
		out.WriteByte(ch)
		e.line = ch == '\r' || ch == '\n'
	}
	return out.Bytes(), false
}
