package engine

import (
	"fmt"
	"sort"
)

// A node's console output comes in chunks, each with the stream offset
// of its first byte. A site has up to a few chunks of a node on the way
// at once (agent/console NodeWindow), so they may arrive out of order,
// and a chunk may come twice (a resend, a replay). consoleStream puts
// them back in order: what follows the end it has goes out at once, a
// chunk past a gap waits (bounded) for the gap to be filled.
//
// A gap is shown as lost ("[console: N bytes lost at the site]") only
// when it will not be filled:
//   - the site says so: a chunk's Lost covers it (the site dropped those
//     bytes past its bound, or a replay's first chunk: nothing older);
//   - more than ConsolePendingChunks chunks or ConsolePendingBytes bytes
//     wait behind it (a site never has that many of a node on the way);
//   - it stayed unfilled for ConsoleGapAsks+1 periods of ConsoleGapWait
//     while the site was online, after the coordinator asked the site to
//     send its kept output again at each of the first ConsoleGapAsks
//     (console.go, gapCheck).

// Bounds of the chunks waiting behind a gap, per node.
const (
	ConsolePendingChunks = 16
	ConsolePendingBytes  = 256 << 10
)

type consoleStream struct {
	end          uint64 // stream offset of the end of what went out
	pending      []pendingChunk
	pendingBytes int
}

// pendingChunk waits behind a gap: data starts at from; the bytes from
// lostFrom to from will not come.
type pendingChunk struct {
	from, lostFrom uint64
	data           []byte
}

func lostNotice(n uint64) []byte {
	return []byte(fmt.Sprintf("\r\n[console: %d bytes lost at the site]\r\n", n))
}

// add takes a chunk of data at offset from, whose lost bytes before it
// will not come, and returns what goes out now, in order (nil: nothing).
func (s *consoleStream) add(from, lost uint64, data []byte) []byte {
	to := from + uint64(len(data))
	if len(data) == 0 && lost == 0 {
		return nil // a notice only (console.go reads it): nothing to put in order
	}
	if from > s.end {
		// Past a gap: it waits.
		i := sort.Search(len(s.pending), func(i int) bool { return s.pending[i].from >= from })
		switch {
		case i < len(s.pending) && s.pending[i].from == from:
			// The same offset again: keep the longer, and the wider loss.
			p := &s.pending[i]
			if len(data) > len(p.data) {
				s.pendingBytes += len(data) - len(p.data)
				p.data = append([]byte(nil), data...)
			}
			p.lostFrom = min(p.lostFrom, from-lost)
		default:
			s.pending = append(s.pending, pendingChunk{})
			copy(s.pending[i+1:], s.pending[i:])
			s.pending[i] = pendingChunk{from: from, lostFrom: from - lost, data: append([]byte(nil), data...)}
			s.pendingBytes += len(data)
		}
		var out []byte
		for len(s.pending) > ConsolePendingChunks || s.pendingBytes > ConsolePendingBytes {
			// Too much waits: the first gap is lost.
			out = append(out, s.release(s.pending[0].from)...)
		}
		return append(out, s.drain()...)
	}
	var out []byte
	if to > s.end {
		out = append(out, data[s.end-from:]...)
		s.end = to
	}
	return append(out, s.drain()...)
}

// drain sends what waited and may go now: a chunk that follows the end,
// and everything before a chunk whose lost bytes reach back to the end.
func (s *consoleStream) drain() []byte {
	var out []byte
	for {
		h := s.end
		for _, p := range s.pending {
			if p.lostFrom <= s.end {
				h = max(h, p.from)
			}
		}
		if len(s.pending) == 0 || s.pending[0].from > h {
			return out
		}
		out = append(out, s.release(h)...)
	}
}

// release sends every waiting chunk that starts at or before h, in
// order, the gaps before them shown as lost.
func (s *consoleStream) release(h uint64) []byte {
	var out []byte
	for len(s.pending) > 0 && s.pending[0].from <= h {
		p := s.pending[0]
		s.pending = s.pending[1:]
		s.pendingBytes -= len(p.data)
		to := p.from + uint64(len(p.data))
		switch {
		case p.from > s.end:
			out = append(out, lostNotice(p.from-s.end)...)
			out = append(out, p.data...)
			s.end = to
		case to > s.end:
			out = append(out, p.data[s.end-p.from:]...)
			s.end = to
		}
	}
	if len(s.pending) == 0 {
		s.pending = nil
	}
	return out
}

// giveUp shows the gaps before every waiting chunk as lost and sends the
// chunks.
func (s *consoleStream) giveUp() []byte {
	if len(s.pending) == 0 {
		return nil
	}
	return s.release(s.pending[len(s.pending)-1].from)
}

// waiting tells whether chunks wait behind a gap.
func (s *consoleStream) waiting() bool { return len(s.pending) > 0 }
