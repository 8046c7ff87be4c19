package burnin

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
)

// The network burn-in (IPA's fio network burn-in, Go-native) runs between
// two ramdisks. The writer listens; the reader connects. Before any data,
// both prove that they hold the pair's key (which the coordinator derives
// for the two nodes and hands to each ramdisk with the step), each over
// the other's fresh nonce, and neither tells anything (no node UUID)
// before the other has shown it holds the key: the UUIDs are bound into
// the MACs, never sent.
//
//	reader -> writer  hello:     magic, nonce R, HMAC(key, "hello", R, reader UUID, writer UUID)
//	writer -> reader  challenge: magic, nonce W, HMAC(key, "writer", R, W, writer UUID, reader UUID)
//	reader -> writer  response:  HMAC(key, "reader", W, R, reader UUID, writer UUID)
//	writer -> reader  accept:    magic
//
// Every message has a fixed size, read under the handshake deadline. The
// writer answers only a hello with the right MAC (a replayed hello gets a
// challenge over a fresh W, which a replayed response does not answer).
// It handshakes with several connections at once (a bounded number, and
// fewer per source address) and ignores those that fail, so that a port
// scan, garbage or a stranger neither fails the step nor keeps the
// partner out; only the pairing timeout ends the wait.
// Then the writer streams for the runtime, the reader checks every block
// (a pattern both derive from the key and the nonces, and a sequence
// number), and the direction swaps on the same connection.

const (
	netMagic    = "bmnetbi2"
	nonceSize   = 32
	uuidSize    = 36
	macSize     = sha256.Size
	helloSize   = len(netMagic) + nonceSize + macSize
	challSize   = len(netMagic) + nonceSize + macSize
	blockSize   = 64 << 10
	patternSize = 1 << 20
	frameHeader = 16
)

// The writer's handshake budget: connections being authenticated at once,
// in all and from one source address. Past them a connection is closed
// at once (and counted as refused); the partner's own address (when the
// writer is told it, as Partner) has a share that strangers cannot use.
const (
	maxHandshakes          = 16
	maxHandshakesPerSource = 4
)

// Frame types of the stream.
const (
	frameData   = 1
	frameEnd    = 2
	frameReport = 3
)

// NetworkOptions tunes Network.
type NetworkOptions struct {
	// Role is drivers.NetworkRoleWriter (listens on Listen, writes
	// first) or drivers.NetworkRoleReader (connects to Partner).
	Role string
	// Listen is the writer's listening address; "" means all addresses,
	// port drivers.NetworkBurninPort.
	Listen string
	// Partner is the writer's HOST:PORT (the reader's), or the reader's
	// address as the writer's operator gave it (shown in the result).
	Partner string
	// Node and PartnerNode are the two nodes' UUIDs.
	Node, PartnerNode string
	// Key is the pair's key.
	Key []byte
	// Runtime is each direction's duration.
	Runtime time.Duration
	// PairingTimeout bounds the wait for an authenticated partner.
	PairingTimeout time.Duration
	// HandshakeTimeout bounds one handshake (default 5 s).
	HandshakeTimeout time.Duration
	// MaxFailedHandshakes ends the reader's pairing after this many
	// failed handshakes with the writer's address (default 3). The
	// writer never ends its wait on failed handshakes (a stranger could
	// fail them on purpose): only PairingTimeout ends it.
	MaxFailedHandshakes int
	// RetryInterval is the reader's pause between attempts (default 1 s).
	RetryInterval time.Duration
	// IdleTimeout fails a stream that moves nothing this long (default
	// 30 s).
	IdleTimeout time.Duration
	// Progress, if set, gets the fraction of the two directions done.
	Progress func(float64)
}

// DirectionResult is one direction of the burn-in.
type DirectionResult struct {
	Bytes   uint64  `json:"bytes"`
	Seconds float64 `json:"seconds"`
	MBps    float64 `json:"mb_per_s"`
	// Errors is the blocks that arrived corrupted, out of order or
	// short, as the receiving side counted them.
	Errors uint64 `json:"errors"`
}

// NetworkResult is what Network measured.
type NetworkResult struct {
	Role        string `json:"role"`
	Partner     string `json:"partner"`
	PartnerNode string `json:"partner_node"`
	// Write is this node to its partner, Read the partner to this node.
	Write DirectionResult `json:"write"`
	Read  DirectionResult `json:"read"`
	// FailedHandshakes is the handshakes refused before the partner's
	// (on the writer: connections that sent nothing, garbage or no proof
	// of the key, and those over the handshake budget).
	FailedHandshakes int `json:"failed_handshakes"`
}

func (o *NetworkOptions) defaults() {
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.MaxFailedHandshakes <= 0 {
		o.MaxFailedHandshakes = 3
	}
	if o.RetryInterval <= 0 {
		o.RetryInterval = time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 30 * time.Second
	}
	if o.Listen == "" {
		o.Listen = fmt.Sprintf(":%d", drivers.NetworkBurninPort)
	}
}

// Network runs the network burn-in with the partner: it pairs (the
// writer listens, the reader connects, both authenticate), streams each
// way for Runtime, and returns the figures. A block that arrives wrong
// fails it after both directions, with the figures.
func Network(ctx context.Context, opts NetworkOptions) (NetworkResult, error) {
	opts.defaults()
	res := NetworkResult{Role: opts.Role, Partner: opts.Partner, PartnerNode: opts.PartnerNode}
	if len(opts.Key) < 16 {
		return res, errors.New("network burn-in: the pair key is missing or too short")
	}
	if len(opts.Node) != uuidSize || len(opts.PartnerNode) != uuidSize {
		return res, fmt.Errorf("network burn-in: node %q and partner node %q must be UUIDs", opts.Node, opts.PartnerNode)
	}
	var (
		conn  net.Conn
		seed  []byte
		fails int
		err   error
	)
	switch opts.Role {
	case drivers.NetworkRoleWriter:
		conn, seed, fails, err = listenPartner(ctx, opts)
	case drivers.NetworkRoleReader:
		conn, seed, fails, err = dialPartner(ctx, opts)
	default:
		return res, fmt.Errorf("network burn-in: role %q: want writer or reader", opts.Role)
	}
	res.FailedHandshakes = fails
	if err != nil {
		return res, err
	}
	defer conn.Close()
	// An abort closes the connection, which ends any read or write.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	pat := newPattern(seed)
	total := 2 * opts.Runtime
	start := time.Now()
	progress := func() {
		if opts.Progress != nil && total > 0 {
			opts.Progress(min(1, float64(time.Since(start))/float64(total)))
		}
	}
	writerFirst := opts.Role == drivers.NetworkRoleWriter
	for phase := range 2 {
		sending := (phase == 0) == writerFirst
		var d DirectionResult
		var err error
		if sending {
			d, err = sendDirection(conn, pat, opts, progress)
			res.Write = d
		} else {
			d, err = receiveDirection(conn, pat, opts, progress)
			res.Read = d
		}
		if err != nil {
			if ctx.Err() != nil {
				return res, fmt.Errorf("network burn-in cancelled after %.0fs: %w", time.Since(start).Seconds(), ctx.Err())
			}
			dir := "reading from"
			if sending {
				dir = "writing to"
			}
			return res, fmt.Errorf("network burn-in: %s partner node %s at %s: %w", dir, opts.PartnerNode, opts.Partner, err)
		}
		progress()
	}
	if res.Write.Errors+res.Read.Errors > 0 {
		return res, fmt.Errorf("network burn-in with partner node %s: %d of the blocks this node wrote and %d of those it read arrived wrong; the NICs, cables or switch between them are faulty",
			opts.PartnerNode, res.Write.Errors, res.Read.Errors)
	}
	return res, nil
}

// mac is HMAC(key, label, parts...).
func mac(key []byte, label string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

func nonce() []byte {
	b := make([]byte, nonceSize)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return b
}

// patternSeed is what both sides derive the stream's pattern from.
func patternSeed(key, readerNonce, writerNonce []byte) []byte {
	return mac(key, "pattern", readerNonce, writerNonce)
}

// HandshakeError is a refused handshake: the peer is not the partner,
// or does not hold the pair's key.
type HandshakeError struct {
	Peer   string
	Reason string
}

func (e *HandshakeError) Error() string { return e.Peer + ": " + e.Reason }

// listenPartner is the writer's pairing: it accepts connections and
// handshakes with each (HandshakeTimeout each, up to maxHandshakes at
// once, maxHandshakesPerSource from one address) until one proves the
// key or the pairing timeout passes. Failed handshakes are counted and
// the last one's reason named, but end nothing. The listening socket
// lives only this long.
func listenPartner(ctx context.Context, opts NetworkOptions) (net.Conn, []byte, int, error) {
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", opts.Listen)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("network burn-in: cannot listen on %s: %w", opts.Listen, err)
	}
	defer l.Close()
	deadline := time.Now().Add(opts.PairingTimeout)
	_ = l.(*net.TCPListener).SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	partnerHost := hostOf(opts.Partner)

	type outcome struct {
		c    net.Conn
		seed []byte
		err  error
	}
	var (
		mu       sync.Mutex
		open     = map[net.Conn]string{} // handshakes under way, by source
		perSrc   = map[string]int{}
		done     bool
		refused  int
		results  = make(chan outcome)
		finished = make(chan struct{})
		acceptEr = make(chan error, 1)
	)
	drop := func(c net.Conn) {
		mu.Lock()
		if src, ok := open[c]; ok {
			delete(open, c)
			if perSrc[src]--; perSrc[src] == 0 {
				delete(perSrc, src)
			}
		}
		mu.Unlock()
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				acceptEr <- err
				return
			}
			src := hostOf(c.RemoteAddr().String())
			mu.Lock()
			others := len(open) - perSrc[partnerHost]
			over := done || perSrc[src] >= maxHandshakesPerSource ||
				(src != partnerHost && others >= maxHandshakes-maxHandshakesPerSource) || len(open) >= maxHandshakes
			if over {
				if !done {
					refused++
				}
				mu.Unlock()
				c.Close()
				continue
			}
			open[c] = src
			perSrc[src]++
			mu.Unlock()
			go func() {
				seed, err := writerHandshake(c, opts)
				drop(c)
				select {
				case results <- outcome{c, seed, err}:
				case <-finished:
					c.Close()
				}
			}()
		}
	}()
	// finish ends the handshakes still under way (their goroutines close
	// their connections) and the accept loop.
	finish := func() int {
		mu.Lock()
		done = true
		for c := range open {
			c.Close()
		}
		n := refused
		mu.Unlock()
		close(finished)
		l.Close()
		return n
	}
	fails := 0
	var last error
	for {
		select {
		case r := <-results:
			if r.err == nil {
				return r.c, r.seed, fails + finish(), nil
			}
			r.c.Close()
			fails++
			last = r.err
		case <-acceptEr:
			n := finish()
			fails += n
			if ctx.Err() != nil {
				return nil, nil, fails, fmt.Errorf("network burn-in cancelled while waiting for partner node %s: %w", opts.PartnerNode, ctx.Err())
			}
			why := "no connection"
			if last != nil {
				why = fmt.Sprintf("%d failed handshakes, the last: %v", fails, last)
			} else if n > 0 {
				why = fmt.Sprintf("%d connections over the handshake budget", n)
			}
			return nil, nil, fails, fmt.Errorf("network burn-in: partner node %s did not connect and authenticate to this writer (port %s) within %s (%s); "+
				"is it cleaning with burnin_network as reader, with this node as partner_node and partner set to this node's address, and can it reach the port? "+
				"Both nodes must name each other as partner_node (their pair key is derived from both)",
				opts.PartnerNode, portOf(opts.Listen), opts.PairingTimeout, why)
		}
	}
}

// hostOf is the host of HOST:PORT (addr itself when it has no port).
func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return p
}

// writerHandshake authenticates a connection on the writer's side. It
// sends nothing before a hello with the pair's MAC has arrived.
func writerHandshake(c net.Conn, opts NetworkOptions) ([]byte, error) {
	peer := "peer " + c.RemoteAddr().String()
	_ = c.SetDeadline(time.Now().Add(opts.HandshakeTimeout))
	hello := make([]byte, helloSize)
	if _, err := io.ReadFull(c, hello); err != nil {
		return nil, &HandshakeError{peer, "no complete hello within the handshake deadline: " + ioReason(err)}
	}
	if string(hello[:len(netMagic)]) != netMagic {
		return nil, &HandshakeError{peer, "sent something else than a burn-in hello"}
	}
	p := hello[len(netMagic):]
	rNonce, rMAC := p[:nonceSize], p[nonceSize:]
	self, partner := []byte(opts.Node), []byte(opts.PartnerNode)
	if !hmac.Equal(rMAC, mac(opts.Key, "hello", rNonce, partner, self)) {
		return nil, &HandshakeError{peer, "its hello does not carry this pair's key (a stranger, or a reader that names other nodes or holds another pair's key)"}
	}
	wNonce := nonce()
	chall := make([]byte, 0, challSize)
	chall = append(chall, netMagic...)
	chall = append(chall, wNonce...)
	chall = append(chall, mac(opts.Key, "writer", rNonce, wNonce, self, partner)...)
	if _, err := c.Write(chall); err != nil {
		return nil, &HandshakeError{peer, "challenge not delivered: " + ioReason(err)}
	}
	resp := make([]byte, macSize)
	if _, err := io.ReadFull(c, resp); err != nil {
		return nil, &HandshakeError{peer, "closed without proving the pair key over this writer's nonce: " + ioReason(err)}
	}
	if !hmac.Equal(resp, mac(opts.Key, "reader", wNonce, rNonce, partner, self)) {
		return nil, &HandshakeError{peer, "did not prove this pair's key over this writer's nonce (a replayed handshake?)"}
	}
	if _, err := c.Write([]byte(netMagic)); err != nil {
		return nil, &HandshakeError{peer, "accept not delivered: " + ioReason(err)}
	}
	_ = c.SetDeadline(time.Time{})
	return patternSeed(opts.Key, rNonce, wNonce), nil
}

// dialPartner is the reader's pairing: it connects to the writer until
// the pairing timeout, retrying a refused or unanswered connection, and
// gives up after MaxFailedHandshakes failed handshakes.
func dialPartner(ctx context.Context, opts NetworkOptions) (net.Conn, []byte, int, error) {
	deadline := time.Now().Add(opts.PairingTimeout)
	fails := 0
	var last error
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil, fails, fmt.Errorf("network burn-in: the writer, partner node %s at %s, did not answer within %s (the last attempt: %v); "+
				"is it cleaning with burnin_network as writer with this node as partner_node, and is %s its address and port as this node reaches it?",
				opts.PartnerNode, opts.Partner, opts.PairingTimeout, last, opts.Partner)
		}
		d := net.Dialer{Timeout: min(left, opts.HandshakeTimeout)}
		c, err := d.DialContext(ctx, "tcp", opts.Partner)
		if err == nil {
			var seed []byte
			stop := context.AfterFunc(ctx, func() { c.Close() })
			seed, err = readerHandshake(c, opts)
			stop()
			if err == nil {
				return c, seed, fails, nil
			}
			c.Close()
			fails++
			if fails >= opts.MaxFailedHandshakes {
				return nil, nil, fails, fmt.Errorf("network burn-in: %d handshakes with %s failed (the last: %v); "+
					"both nodes must name each other as partner_node and clean with burnin_network at the same time", fails, opts.Partner, err)
			}
		}
		if ctx.Err() != nil {
			return nil, nil, fails, fmt.Errorf("network burn-in cancelled while pairing with partner node %s: %w", opts.PartnerNode, ctx.Err())
		}
		last = err
		t := time.NewTimer(min(opts.RetryInterval, max(time.Until(deadline), 0)))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fails, fmt.Errorf("network burn-in cancelled while pairing with partner node %s: %w", opts.PartnerNode, ctx.Err())
		case <-t.C:
		}
	}
}

// readerHandshake authenticates the writer on the reader's side.
func readerHandshake(c net.Conn, opts NetworkOptions) ([]byte, error) {
	peer := "writer at " + opts.Partner
	_ = c.SetDeadline(time.Now().Add(opts.HandshakeTimeout))
	rNonce := nonce()
	self, partner := []byte(opts.Node), []byte(opts.PartnerNode)
	hello := make([]byte, 0, helloSize)
	hello = append(hello, netMagic...)
	hello = append(hello, rNonce...)
	hello = append(hello, mac(opts.Key, "hello", rNonce, self, partner)...)
	if _, err := c.Write(hello); err != nil {
		return nil, &HandshakeError{peer, "hello not delivered: " + ioReason(err)}
	}
	chall := make([]byte, challSize)
	if _, err := io.ReadFull(c, chall); err != nil {
		return nil, &HandshakeError{peer, "no complete challenge within the handshake deadline (" + ioReason(err) + "): " +
			"the writer did not recognise this node's hello; both nodes must name each other as partner_node and clean at the same time"}
	}
	if string(chall[:len(netMagic)]) != netMagic {
		return nil, &HandshakeError{peer, "answered something else than a burn-in challenge (another service on that port?)"}
	}
	p := chall[len(netMagic):]
	wNonce, wMAC := p[:nonceSize], p[nonceSize:]
	if !hmac.Equal(wMAC, mac(opts.Key, "writer", rNonce, wNonce, partner, self)) {
		return nil, &HandshakeError{peer, "did not prove this pair's key"}
	}
	if _, err := c.Write(mac(opts.Key, "reader", wNonce, rNonce, self, partner)); err != nil {
		return nil, &HandshakeError{peer, "response not delivered: " + ioReason(err)}
	}
	ok := make([]byte, len(netMagic))
	if _, err := io.ReadFull(c, ok); err != nil || string(ok) != netMagic {
		return nil, &HandshakeError{peer, "did not accept this node's proof of the pair key"}
	}
	_ = c.SetDeadline(time.Time{})
	return patternSeed(opts.Key, rNonce, wNonce), nil
}

func ioReason(err error) string {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return "timed out"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return err.Error()
}

// pattern is the data both sides expect: a ring derived from the seed,
// each block at an offset given by its sequence number.
type netPattern struct{ ring []byte }

func newPattern(seed []byte) *netPattern {
	ring := make([]byte, patternSize+blockSize)
	x := binary.LittleEndian.Uint64(seed) | 1
	for i := 0; i+8 <= len(ring); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(ring[i:], x*0x2545f4914f6cdd1d)
	}
	return &netPattern{ring: ring}
}

func (p *netPattern) block(seq uint64) []byte {
	off := (seq * 8200) % patternSize
	return p.ring[off : off+blockSize]
}

func putHeader(h []byte, typ byte, n uint32, seq uint64) {
	clear(h[:4])
	h[0] = typ
	binary.BigEndian.PutUint32(h[4:], n)
	binary.BigEndian.PutUint64(h[8:], seq)
}

// sendDirection writes blocks for the runtime, then the end frame, and
// reads the receiver's report.
func sendDirection(c net.Conn, pat *netPattern, opts NetworkOptions, progress func()) (DirectionResult, error) {
	var d DirectionResult
	h := make([]byte, frameHeader)
	start := time.Now()
	end := start.Add(opts.Runtime)
	lastTick := start
	bufs := make(net.Buffers, 0, 2)
	for seq := uint64(0); time.Now().Before(end); seq++ {
		_ = c.SetWriteDeadline(time.Now().Add(opts.IdleTimeout))
		putHeader(h, frameData, blockSize, seq)
		bufs = append(bufs[:0], h, pat.block(seq))
		if _, err := bufs.WriteTo(c); err != nil {
			return d, fmt.Errorf("after %d bytes: %s", d.Bytes, ioReason(err))
		}
		d.Bytes += blockSize
		if time.Since(lastTick) >= time.Second {
			lastTick = time.Now()
			progress()
		}
	}
	d.Seconds = time.Since(start).Seconds()
	endFrame := make([]byte, frameHeader+8)
	putHeader(endFrame, frameEnd, 8, 0)
	binary.BigEndian.PutUint64(endFrame[frameHeader:], d.Bytes)
	_ = c.SetDeadline(time.Now().Add(opts.IdleTimeout))
	if _, err := c.Write(endFrame); err != nil {
		return d, fmt.Errorf("end of the stream not delivered: %s", ioReason(err))
	}
	rep := make([]byte, frameHeader+16)
	if _, err := io.ReadFull(c, rep); err != nil {
		return d, fmt.Errorf("no report from the partner after %d bytes: %s", d.Bytes, ioReason(err))
	}
	if rep[0] != frameReport || binary.BigEndian.Uint32(rep[4:]) != 16 {
		return d, errors.New("the partner's report is malformed")
	}
	got, errs := binary.BigEndian.Uint64(rep[frameHeader:]), binary.BigEndian.Uint64(rep[frameHeader+8:])
	d.Errors = errs
	if got != d.Bytes {
		return d, fmt.Errorf("%d bytes written, the partner received %d", d.Bytes, got)
	}
	if d.Seconds > 0 {
		d.MBps = float64(d.Bytes) / 1e6 / d.Seconds
	}
	_ = c.SetDeadline(time.Time{})
	return d, nil
}

// receiveDirection reads and checks blocks until the end frame, then
// sends the report. Every frame's size is checked before it is read.
func receiveDirection(c net.Conn, pat *netPattern, opts NetworkOptions, progress func()) (DirectionResult, error) {
	var d DirectionResult
	h := make([]byte, frameHeader)
	buf := make([]byte, blockSize)
	var start time.Time
	lastTick := time.Now()
	want := uint64(0)
	for {
		_ = c.SetReadDeadline(time.Now().Add(opts.IdleTimeout))
		if _, err := io.ReadFull(c, h); err != nil {
			return d, fmt.Errorf("after %d bytes: %s", d.Bytes, ioReason(err))
		}
		if start.IsZero() {
			start = time.Now()
		}
		typ, n, seq := h[0], binary.BigEndian.Uint32(h[4:]), binary.BigEndian.Uint64(h[8:])
		switch {
		case typ == frameData && n == blockSize:
			if _, err := io.ReadFull(c, buf); err != nil {
				return d, fmt.Errorf("after %d bytes: %s", d.Bytes, ioReason(err))
			}
			d.Bytes += blockSize
			if seq != want || !bytes.Equal(buf, pat.block(seq)) {
				d.Errors++
			}
			want = seq + 1
		case typ == frameEnd && n == 8:
			tail := make([]byte, 8)
			if _, err := io.ReadFull(c, tail); err != nil {
				return d, fmt.Errorf("end of the stream: %s", ioReason(err))
			}
			if sent := binary.BigEndian.Uint64(tail); sent != d.Bytes {
				// Lost bytes count as errors, in blocks.
				d.Errors += (max(sent, d.Bytes) - min(sent, d.Bytes) + blockSize - 1) / blockSize
			}
			d.Seconds = time.Since(start).Seconds()
			if d.Seconds > 0 {
				d.MBps = float64(d.Bytes) / 1e6 / d.Seconds
			}
			rep := make([]byte, frameHeader+16)
			putHeader(rep, frameReport, 16, 0)
			binary.BigEndian.PutUint64(rep[frameHeader:], d.Bytes)
			binary.BigEndian.PutUint64(rep[frameHeader+8:], d.Errors)
			_ = c.SetWriteDeadline(time.Now().Add(opts.IdleTimeout))
			if _, err := c.Write(rep); err != nil {
				return d, fmt.Errorf("report not delivered: %s", ioReason(err))
			}
			_ = c.SetDeadline(time.Time{})
			return d, nil
		default:
			return d, fmt.Errorf("malformed frame (type %d, %d bytes) after %d bytes; the stream cannot be trusted", typ, n, d.Bytes)
		}
		if time.Since(lastTick) >= time.Second {
			lastTick = time.Now()
			progress()
		}
	}
}

// NetworkStep runs deploy.burnin_network with a step's args (checked with
// drivers.NetworkBurninArgs; the pair's key as the coordinator added it)
// and returns the step result: the figures and a summary line.
func NetworkStep(ctx context.Context, args map[string]any, progress func(float64, string), listen string) (map[string]any, string, error) {
	nb, err := drivers.NetworkBurninArgs(args)
	if err != nil {
		return nil, "", fmt.Errorf("burnin_network: %w", err)
	}
	node, partner, key, err := drivers.NetworkBurninPair(args)
	if err != nil {
		return nil, "", err
	}
	opts := NetworkOptions{Role: nb.Role, Partner: nb.Partner, Node: node, PartnerNode: partner, Key: key, Listen: listen,
		Runtime: nb.Runtime, PairingTimeout: nb.PairingTimeout, Progress: func(f float64) { progress(f, "network") }}
	res, err := Network(ctx, opts)
	account := NetworkSummary(res)
	if err != nil {
		return nil, account, err
	}
	b, _ := json.Marshal(res)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return map[string]any{"network": m, "summary": account}, account, nil
}

// NetworkSummary is the result's line for the node's history.
func NetworkSummary(r NetworkResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s paired with node %s (%s): wrote %d bytes in %.1fs (%.1f MB/s), read %d bytes in %.1fs (%.1f MB/s), %d errors",
		r.Role, r.PartnerNode, r.Partner, r.Write.Bytes, r.Write.Seconds, r.Write.MBps, r.Read.Bytes, r.Read.Seconds, r.Read.MBps, r.Write.Errors+r.Read.Errors)
	if r.FailedHandshakes > 0 {
		fmt.Fprintf(&b, ", %d refused handshakes", r.FailedHandshakes)
	}
	return b.String()
}
