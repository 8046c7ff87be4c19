package protocol

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
)

// The serial console of a node, relayed by its site (docs/console.md).
//
// The coordinator sends console commands (KindConsole) on the site's
// console/cmd topic: enable (with the node's driver and driver_info, as
// a BMC command carries them), disable, input (what an operator typed)
// and replay (send again what is kept). console/cmd is a command topic:
// the brokers let only the coordinator publish on it, so neither a site
// credential nor a ramdisk can type on a node's console.
//
// The edge agent sends what the console printed (KindConsoleOutput) on
// the site's console/evt topic, in chunks of at most MaxConsoleChunk
// bytes before compression (raw DEFLATE), each with the offset of its
// first byte in the node's console stream: a node has up to a few chunks
// on the way at once, which may arrive out of order; the coordinator puts
// them in order, keeps what follows what it has and ignores what it has
// already. Console output
// is sent after the site's commands' results and reports, within a
// per-site bandwidth bound; what the WAN could not carry waits at the
// site (the last --console-keep bytes of each node).
const (
	KindConsole       = "console"
	KindConsoleOutput = "console_output"
)

// Console command actions (Message.Action of a KindConsole message).
const (
	ConsoleEnable  = "enable"
	ConsoleDisable = "disable"
	ConsoleInput   = "input"
	ConsoleReplay  = "replay"
)

// Bounds of console messages.
const (
	// MaxConsoleChunk bounds the bytes of one output chunk (uncompressed).
	MaxConsoleChunk = 16 << 10
	// MaxConsoleInput bounds the bytes of one input message.
	MaxConsoleInput = 4 << 10
)

// ConsoleData is the payload of console messages.
type ConsoleData struct {
	// Input: the bytes typed (input commands), at most MaxConsoleInput.
	Input []byte `json:"input,omitempty"`
	// Output: raw DEFLATE of the bytes printed (output), at most
	// MaxConsoleChunk once inflated; Offset is the stream offset of its
	// first byte.
	Output []byte `json:"output,omitempty"`
	Offset uint64 `json:"offset,omitempty"`
	// Lost, on output: the Lost bytes before Offset will not come (the
	// site dropped them past its bound before it could send them, or, on
	// the first chunk of a replay, Lost = Offset: the site has nothing
	// older). The coordinator waits for a gap before Offset that Lost
	// does not cover (the chunk before may still be on the way: a node
	// has up to a few chunks on the way at once) and shows what Lost
	// covers as lost.
	Lost uint64 `json:"lost,omitempty"`
	// Error, on output: why the site could not open or lost the console
	// (the dialer's error), for the node's history.
	Error string `json:"error,omitempty"`
	// Closed, on output: the site has closed the console (disabled, or
	// the BMC's connection ended).
	Closed bool `json:"closed,omitempty"`
}

// ConsoleCmdTopic is where the coordinator sends a site's console commands.
func ConsoleCmdTopic(site string) string { return TopicPrefix + "/site/" + site + "/console/cmd" }

// ConsoleEvtTopic is where a site's edge agent sends console output.
func ConsoleEvtTopic(site string) string { return TopicPrefix + "/site/" + site + "/console/evt" }

// AllConsoleEvents is the coordinator's filter for console output.
const AllConsoleEvents = TopicPrefix + "/site/+/console/evt"

// DeflateConsole compresses a chunk of console output.
func DeflateConsole(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

// InflateConsole decompresses a chunk of console output, refusing one
// that inflates past MaxConsoleChunk.
func InflateConsole(b []byte) ([]byte, error) {
	if len(b) == 0 {
		return nil, nil // a notice (closed, error) without output
	}
	r := flate.NewReader(bytes.NewReader(b))
	defer r.Close()
	out, err := io.ReadAll(io.LimitReader(r, MaxConsoleChunk+1))
	if err != nil {
		return nil, fmt.Errorf("console output is not raw DEFLATE: %v", err)
	}
	if len(out) > MaxConsoleChunk {
		return nil, fmt.Errorf("console output chunk inflates past %d bytes", MaxConsoleChunk)
	}
	return out, nil
}

func checkConsole(m *Message) error {
	if err := m.needAll(need{m.Node != "", "node"}, need{m.Action != "", "action"}); err != nil {
		return err
	}
	c := m.Console
	switch m.Action {
	case ConsoleEnable:
		return m.need(m.Driver != "", "driver")
	case ConsoleDisable, ConsoleReplay:
	case ConsoleInput:
		if err := m.need(c != nil && len(c.Input) > 0, "console.input"); err != nil {
			return err
		}
		if len(c.Input) > MaxConsoleInput {
			return fmt.Errorf("console input %q of %d bytes is over the limit of %d", m.ID, len(c.Input), MaxConsoleInput)
		}
	default:
		return fmt.Errorf("console message %q has unknown action %q", m.ID, m.Action)
	}
	if c != nil && (len(c.Output) > 0 || c.Closed || c.Error != "") {
		return fmt.Errorf("console command %q carries output fields; only console_output does", m.ID)
	}
	return nil
}

func checkConsoleOutput(m *Message) error {
	if err := m.needAll(need{m.Node != "", "node"}, need{m.Console != nil, "console"}); err != nil {
		return err
	}
	c := m.Console
	if len(c.Input) > 0 {
		return fmt.Errorf("console output %q carries input; only the coordinator sends input", m.ID)
	}
	// DEFLATE cannot shrink below ~1/1032: a larger compressed chunk
	// cannot inflate to at most MaxConsoleChunk bytes (InflateConsole
	// checks the real size).
	if len(c.Output) > MaxConsoleChunk+MaxConsoleChunk/8+64 {
		return fmt.Errorf("console output %q of %d compressed bytes is over the limit", m.ID, len(c.Output))
	}
	if c.Lost > c.Offset {
		return fmt.Errorf("console output %q has lost %d bytes before offset %d", m.ID, c.Lost, c.Offset)
	}
	if len(c.Error) > 1024 {
		return fmt.Errorf("console output %q error of %d bytes is over the limit of 1024", m.ID, len(c.Error))
	}
	return nil
}
