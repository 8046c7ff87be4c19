package engine

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// streamOf feeds chunks to a consoleStream and returns all it sent out.
type streamRec struct {
	s   consoleStream
	out []byte
}

func (r *streamRec) add(from, lost uint64, data string) string {
	b := r.s.add(from, lost, []byte(data))
	r.out = append(r.out, b...)
	return string(b)
}

func TestConsoleStreamInOrderAndDuplicates(t *testing.T) {
	var r streamRec
	if got := r.add(0, 0, "hello "); got != "hello " {
		t.Fatalf("first chunk gave %q", got)
	}
	if got := r.add(0, 0, "hello "); got != "" {
		t.Fatalf("the same chunk again gave %q", got)
	}
	if got := r.add(3, 0, "lo world"); got != "world" {
		t.Fatalf("an overlapping chunk gave %q, want only what follows", got)
	}
	if got := r.add(11, 0, ""); got != "" || r.s.waiting() {
		t.Fatalf("an empty chunk (a notice) gave %q, waiting %v", got, r.s.waiting())
	}
	if string(r.out) != "hello world" || r.s.end != 11 {
		t.Fatalf("stream %q ending at %d", r.out, r.s.end)
	}
}

// TestConsoleStreamReorders: chunks that come out of order go out in
// order once the gap is filled, nothing shown as lost; a duplicate of a
// waiting chunk waits once.
func TestConsoleStreamReorders(t *testing.T) {
	var r streamRec
	r.add(0, 0, "aaa")
	if got := r.add(6, 0, "ccc"); got != "" || !r.s.waiting() {
		t.Fatalf("a chunk past a gap gave %q at once (waiting %v)", got, r.s.waiting())
	}
	r.add(9, 0, "ddd")
	r.add(6, 0, "ccc") // a resend of a waiting chunk
	if len(r.s.pending) != 2 || r.s.pendingBytes != 6 {
		t.Fatalf("%d chunks (%d bytes) wait, want 2 (6): a duplicate waits once", len(r.s.pending), r.s.pendingBytes)
	}
	if got := r.add(3, 0, "bbb"); got != "bbbcccddd" {
		t.Fatalf("the gap filled gave %q, want bbbcccddd", got)
	}
	if r.s.waiting() || r.s.pendingBytes != 0 || string(r.out) != "aaabbbcccddd" {
		t.Fatalf("stream %q, waiting %v (%d bytes)", r.out, r.s.waiting(), r.s.pendingBytes)
	}
	// Every permutation of four chunks gives the same stream.
	chunks := []string{"one ", "two ", "three ", "four"}
	offs := []uint64{0, 4, 8, 14}
	for _, perm := range [][]int{{3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 3, 1}, {0, 2, 1, 3}} {
		var r streamRec
		for _, i := range perm {
			r.add(offs[i], 0, chunks[i])
		}
		if string(r.out) != "one two three four" || r.s.waiting() {
			t.Errorf("order %v gave %q (waiting %v)", perm, r.out, r.s.waiting())
		}
	}
}

// TestConsoleStreamLost: a gap the site says is lost (Lost) is shown as
// lost at once, also when the chunk saying so comes before others that
// precede it; a Lost that does not reach back to the end still waits for
// what precedes it.
func TestConsoleStreamLost(t *testing.T) {
	var r streamRec
	r.add(0, 0, "aaa")
	if got := r.add(10, 7, "kkk"); got != string(lostNotice(7))+"kkk" {
		t.Fatalf("a chunk whose lost bytes reach the end gave %q", got)
	}
	// The site dropped 100..120 while 100 was on the way: 120 waits for
	// it, and what 100 holds is not shown as lost.
	r = streamRec{}
	r.add(0, 0, strings.Repeat("x", 90))
	r.add(120, 10, "after")
	if !r.s.waiting() {
		t.Fatal("a chunk whose lost bytes do not reach the end went out")
	}
	if got := r.add(100, 0, "0123456789"); got != "" {
		t.Fatalf("a chunk past the gap 90..100 gave %q", got)
	}
	if got := r.add(90, 0, "ninety...."); got != "ninety....0123456789"+string(lostNotice(10))+"after" {
		t.Fatalf("the gap filled gave %q", got)
	}
	// A chunk in the lost range that came after all: shown, the rest
	// lost (a replay's first chunk: Lost = Offset).
	r = streamRec{}
	r.add(0, 0, "aaa")
	r.add(5, 0, "ff")
	if got := r.add(20, 20, "zz"); got != string(lostNotice(2))+"ff"+string(lostNotice(13))+"zz" {
		t.Fatalf("a replay's first chunk gave %q", got)
	}
}

// TestConsoleStreamBounds: no more than ConsolePendingChunks chunks and
// ConsolePendingBytes bytes wait behind a gap; past them the gap is
// shown as lost and they go out.
func TestConsoleStreamBounds(t *testing.T) {
	var r streamRec
	r.add(0, 0, "a")
	off := uint64(2)
	for range ConsolePendingChunks {
		if got := r.add(off, 0, "b"); got != "" {
			t.Fatalf("chunk at %d gave %q before the bound", off, got)
		}
		off++
	}
	if len(r.s.pending) != ConsolePendingChunks {
		t.Fatalf("%d wait", len(r.s.pending))
	}
	got := r.add(off, 0, "c")
	want := string(lostNotice(1)) + strings.Repeat("b", ConsolePendingChunks) + "c"
	if got != want || r.s.waiting() {
		t.Fatalf("one chunk past the bound gave %q (waiting %v), want %q", got, r.s.waiting(), want)
	}
	// Bytes: two chunks of half the bound and one more byte.
	r = streamRec{}
	half := strings.Repeat("h", ConsolePendingBytes/2)
	r.add(10, 0, half)
	r.add(10+uint64(len(half)), 0, half)
	if !r.s.waiting() || r.s.pendingBytes != ConsolePendingBytes {
		t.Fatalf("waiting %v, %d bytes", r.s.waiting(), r.s.pendingBytes)
	}
	got = r.add(10+2*uint64(len(half)), 0, "!")
	if !strings.HasPrefix(got, string(lostNotice(10))) || !strings.HasSuffix(got, "!") || r.s.waiting() || r.s.pendingBytes != 0 {
		t.Fatalf("past the byte bound: %d bytes out, waiting %v (%d bytes)", len(got), r.s.waiting(), r.s.pendingBytes)
	}
	if got := r.s.giveUp(); got != nil {
		t.Fatalf("giveUp with nothing waiting gave %q", got)
	}
}

// TestConsoleGapAsksReplayThenLost: through the engine, a chunk past a
// gap waits; the gap is filled by a resend and nothing is shown lost; a
// gap never filled makes the coordinator ask the site for a replay
// ConsoleGapAsks times, then it is shown as lost (and the chunks after
// it). A chunk behind a gap is not in the log or on a watcher before.
func TestConsoleGapAsksReplayThenLost(t *testing.T) {
	e, rec := newEngine(t, Config{})
	n, err := e.CreateNode(NodeSpec{Name: "c1", Driver: "fake", Site: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	e.consoles().gapWait = 100 * time.Millisecond
	_, watch, cancel, err := e.WatchConsole(n.UUID)
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	chunk := func(off, lost uint64, s string) {
		e.HandleMessage(protocol.ConsoleEvtTopic("s1"), mustJSON(&protocol.Message{Kind: protocol.KindConsoleOutput, ID: fmt.Sprint("o", off),
			Site: "s1", Node: n.UUID, Console: &protocol.ConsoleData{Offset: off, Lost: lost, Output: protocol.DeflateConsole([]byte(s))}}))
	}
	replays := func() int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		c := 0
		for _, m := range rec.msgs {
			if m.Kind == protocol.KindConsole && m.Action == protocol.ConsoleReplay && m.Node == n.UUID {
				c++
			}
		}
		return c
	}
	chunk(0, 0, "boot\r\n")
	chunk(12, 0, "line 3\r\n")
	if got := string(e.ConsoleLog(n.UUID)); got != "boot\r\n" {
		t.Fatalf("log %q: the chunk past the gap went in", got)
	}
	chunk(6, 0, "line 2")
	if got := string(e.ConsoleLog(n.UUID)); got != "boot\r\nline 2line 3\r\n" {
		t.Fatalf("log %q after the gap was filled", got)
	}
	var seen []byte
	for len(seen) < len("boot\r\nline 2line 3\r\n") {
		select {
		case b := <-watch:
			seen = append(seen, b...)
		case <-time.After(10 * time.Second):
			t.Fatalf("watcher has %q", seen)
		}
	}
	if string(seen) != "boot\r\nline 2line 3\r\n" {
		t.Fatalf("watcher saw %q", seen)
	}
	// A gap nobody fills.
	chunk(30, 0, "later")
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(string(e.ConsoleLog(n.UUID)), "later") {
		if time.Now().After(deadline) {
			t.Fatalf("the unfilled gap was not shown as lost: log %q, %d replays asked", e.ConsoleLog(n.UUID), replays())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if want := "boot\r\nline 2line 3\r\n" + string(lostNotice(10)) + "later"; string(e.ConsoleLog(n.UUID)) != want {
		t.Fatalf("log %q, want %q", e.ConsoleLog(n.UUID), want)
	}
	deadline = time.Now().Add(10 * time.Second)
	for replays() < ConsoleGapAsks && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the sender publishes in its own goroutine
	}
	if got := replays(); got != ConsoleGapAsks {
		t.Fatalf("%d replays asked before the gap was shown as lost, want %d", got, ConsoleGapAsks)
	}
	if !bytes.HasSuffix(e.ConsoleLog(n.UUID), []byte("later")) {
		t.Fatal("log")
	}
}
