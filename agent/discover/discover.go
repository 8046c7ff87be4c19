// Package discover is discovery at the edge agent: which machines that
// belong to no node the agent starts discovering (network boot into the
// ramdisk in discovery mode), within the site's bounds as the
// coordinator last gave them (a retained configuration, kept in the
// agent's state folder so that discovery goes on while the WAN is down),
// and the credential of each such boot, which lets its ramdisk report
// one inventory and nothing else. It decides no node's lifecycle and
// touches neither the network nor a disk itself: the coordinator
// enrolls the machines, agent/netboot answers them, the outbox keeps
// their reports.
package discover

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// Reasons a machine is not discovered (Admit).
const (
	ReasonKnown = "known" // one of a node's MACs: not a refusal
	ReasonOff   = "discovery_off"
	ReasonCap   = "cap"
	ReasonRate  = "rate"
)

// PendingTTL is how long a discovery boot holds its place under the cap
// without a report (a machine that asked by DHCP and never reported, a
// random MAC of a flood).
const PendingTTL = 30 * time.Minute

// ReportGrace is how long the ramdisk of a machine that reported is
// still admitted to the site broker: long enough to receive the ack of
// its report (a new report is refused all the same).
const ReportGrace = 10 * time.Minute

// maxReported bounds the reports remembered since the coordinator last
// said how many more machines the site may discover.
const maxReported = 10000

// reportedTTL is how long a report counts against the site's remaining
// discoveries when the coordinator never made a node of it.
const reportedTTL = 24 * time.Hour

// Gate is a site's discovery at its edge agent. Safe for concurrent use.
type Gate struct {
	site  string
	key   []byte
	clock clock.Clock

	mu      sync.Mutex
	conf    protocol.DiscoveryConfig
	known   map[string]bool
	pending map[string]time.Time // MAC → when its boot was answered
	// reported: MAC → the report taken and when; counted against
	// conf.Remaining until the coordinator's configuration lists the MAC
	// as a node's.
	reported map[string]report
	tokens   float64
	filled   time.Time
}

type report struct {
	id string
	at time.Time
	// counted: the coordinator's Remaining does not count it yet.
	counted bool
}

// New returns a gate of site, off until SetConfig; key is the secret the
// boots' credentials derive from (the site's own password: never on the
// wire, and a new site credential makes new ones).
func New(site string, key []byte, c clock.Clock) *Gate {
	return &Gate{site: site, key: key, clock: clock.Or(c), known: map[string]bool{}, pending: map[string]time.Time{}, reported: map[string]report{}}
}

// SetConfig takes the coordinator's configuration. A reported machine
// that is a node now leaves the count of reports.
func (g *Gate) SetConfig(c protocol.DiscoveryConfig) {
	known := make(map[string]bool, len(c.KnownMACs))
	for _, s := range c.KnownMACs {
		if m, err := net.ParseMAC(s); err == nil {
			known[m.String()] = true
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if c.Rate != g.conf.Rate || !g.conf.Enabled {
		g.tokens, g.filled = float64(c.Rate), g.clock.Now()
	}
	g.conf, g.known = c, known
	for mac, r := range g.reported {
		switch {
		case known[mac] && g.clock.Now().Sub(r.at) > ReportGrace:
			delete(g.reported, mac)
		case known[mac]:
			r.counted = false
			g.reported[mac] = r
		}
	}
	for mac := range g.pending {
		if known[mac] {
			delete(g.pending, mac)
		}
	}
}

// Config is the configuration the gate goes by.
func (g *Gate) Config() protocol.DiscoveryConfig {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conf
}

// Enabled tells whether the site discovers.
func (g *Gate) Enabled() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conf.Enabled
}

// Admit tells whether the machine of mac, which asked for network boot,
// is to be discovered; reason says why not. A machine whose boot was
// answered already is admitted again (its DHCP and iPXE retries), within
// PendingTTL.
func (g *Gate) Admit(mac net.HardwareAddr) (ok bool, reason string) {
	key := mac.String()
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.known[key] {
		return false, ReasonKnown
	}
	if !g.conf.Enabled {
		return false, ReasonOff
	}
	g.purgeLocked(now)
	if _, ok := g.pending[key]; ok {
		return true, ""
	}
	if _, ok := g.reported[key]; ok {
		// It reported: its inventory is on its way; a second boot
		// reports nothing new.
		return false, ReasonKnown
	}
	counted := 0
	for _, r := range g.reported {
		if r.counted {
			counted++
		}
	}
	if len(g.pending)+counted >= g.conf.Remaining {
		return false, ReasonCap
	}
	rate := float64(g.conf.Rate)
	g.tokens = min(rate, g.tokens+now.Sub(g.filled).Minutes()*rate)
	g.filled = now
	if g.tokens < 1 {
		return false, ReasonRate
	}
	g.tokens--
	g.pending[key] = now
	return true, ""
}

// purgeLocked forgets the boots answered PendingTTL ago without a
// report, and the reports the coordinator never made a node of a day on
// (it refused them: its cap). g.mu is held.
func (g *Gate) purgeLocked(now time.Time) {
	for m, at := range g.pending {
		if now.Sub(at) > PendingTTL {
			delete(g.pending, m)
		}
	}
	for m, r := range g.reported {
		if now.Sub(r.at) > reportedTTL {
			delete(g.reported, m)
		}
	}
}

// Password is the credential of the discovery boot of mac.
func (g *Gate) Password(mac net.HardwareAddr) string {
	h := hmac.New(sha256.New, g.key)
	h.Write([]byte("discovery:" + g.site + ":" + mac.String()))
	return hex.EncodeToString(h.Sum(nil))
}

// Check admits the ramdisk of a discovery boot to the site broker:
// node is its discovery name (protocol.DiscoveryNode), password its
// boot's credential, and its boot answered and not over.
func (g *Gate) Check(node, password string) error {
	mac, ok := protocol.DiscoveryMAC(node)
	if !ok {
		return errors.New("not a discovery ramdisk's name")
	}
	if !hmac.Equal([]byte(password), []byte(g.Password(mac))) {
		return errors.New("not the credential of this machine's discovery boot")
	}
	key := mac.String()
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if at, ok := g.pending[key]; ok && now.Sub(at) <= PendingTTL {
		return nil
	}
	if r, ok := g.reported[key]; ok && now.Sub(r.at) <= ReportGrace {
		return nil
	}
	return errors.New("this edge agent is not discovering that machine (discovery off, its boot over, or its report taken)")
}

// Report takes a machine's report of id: first is true for the one
// report its boot may make, dup for that report sent again (acked
// again, not kept twice); both false refuse it.
func (g *Gate) Report(node, id string) (first, dup bool) {
	mac, ok := protocol.DiscoveryMAC(node)
	if !ok {
		return false, false
	}
	key := mac.String()
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if r, ok := g.reported[key]; ok {
		return false, r.id == id
	}
	if _, ok := g.pending[key]; !ok || len(g.reported) >= maxReported {
		return false, false
	}
	delete(g.pending, key)
	g.reported[key] = report{id: id, at: now, counted: true}
	return true, false
}

// Pending is how many discovery boots wait for their report, and how
// many reports the coordinator has not made nodes of yet.
func (g *Gate) Pending() (boots, reports int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.purgeLocked(g.clock.Now())
	return len(g.pending), len(g.reported)
}

// IsDiscoveryNode tells whether a ramdisk's name is a discovery boot's.
func IsDiscoveryNode(node string) bool { return strings.HasPrefix(node, protocol.DiscoveryNodePrefix) }
