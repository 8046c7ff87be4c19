//go:build linux

// Package lldp listens for the LLDP frames a node's switches send, on
// each of its NICs, during inspection: raw AF_PACKET sockets bound to
// LLDP's EtherType on one interface each, for a bounded time and a
// bounded number and size of frames. It only receives; it never sends.
package lldp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/bmedge/bmedge/lib/lldp"
)

// Bounds of a listen.
const (
	// DefaultWait is how long Listen waits for a frame on each NIC: a
	// switch sends one every 30 s by default (lldpd, most switches), and
	// one at once when a link comes up; a NIC that has its frame stops
	// waiting.
	DefaultWait = 5 * time.Second
	// MaxFrame is the most bytes of a frame read (a longer one is
	// truncated, and refused if its TLVs run past the cut).
	MaxFrame = 1600
	// MaxFrames is the most frames read on one NIC per listen.
	MaxFrames = 64
	// slice is how often a blocked read wakes to check the deadline.
	slice = 200 * time.Millisecond
)

// Result is what one NIC heard: the TLVs of its first LLDP frame, or
// why it heard none (Err; nil TLVs and nil Err: no frame in time).
type Result struct {
	TLVs []lldp.TLV
	Err  error
}

// Listen listens on each named interface at once for at most wait
// (DefaultWait when 0) and returns what each heard. An interface that
// is down is brought up for the listen, and down again after.
func Listen(ctx context.Context, names []string, wait time.Duration) map[string]Result {
	if wait <= 0 {
		wait = DefaultWait
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	out := make(map[string]Result, len(names))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := listenOne(ctx, name, deadline)
			mu.Lock()
			out[name] = r
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func listenOne(ctx context.Context, name string, deadline time.Time) Result {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return Result{Err: err}
	}
	if ifi.Flags&net.FlagUp == 0 {
		if l, err := netlink.LinkByIndex(ifi.Index); err == nil && netlink.LinkSetUp(l) == nil {
			defer netlink.LinkSetDown(l)
		}
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(lldp.EtherType)))
	if err != nil {
		return Result{Err: fmt.Errorf("LLDP socket on %s: %w", name, err)}
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(lldp.EtherType), Ifindex: ifi.Index}); err != nil {
		return Result{Err: fmt.Errorf("LLDP socket on %s: bind: %w", name, err)}
	}
	for _, mc := range lldp.Multicast {
		mr := unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_MULTICAST, Alen: 6}
		copy(mr.Address[:], mc)
		// A NIC that takes no multicast list still passes the frames
		// the kernel asked for in promiscuous-free mode: not fatal.
		_ = unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, &mr)
	}
	tv := unix.NsecToTimeval(slice.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return Result{Err: fmt.Errorf("LLDP socket on %s: %w", name, err)}
	}
	buf := make([]byte, MaxFrame)
	var last error
	for frames := 0; frames < MaxFrames; {
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			return Result{Err: last}
		}
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return Result{Err: fmt.Errorf("LLDP socket on %s: %w", name, err)}
		}
		frames++
		// The socket is bound to LLDP's EtherType, so the kernel hands
		// the frame with its Ethernet header.
		tlvs, err := lldp.ParseFrame(buf[:n])
		if err != nil {
			last = fmt.Errorf("%s: %w", name, err)
			continue
		}
		return Result{TLVs: tlvs}
	}
	return Result{Err: fmt.Errorf("%s: %d frames, none a valid LLDP frame (last: %v)", name, MaxFrames, last)}
}
