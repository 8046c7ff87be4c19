// Package sites is the coordinator's register of edge sites: each
// registered site (its name and password hash), whether its edge agent is
// online, and what its agent said of itself in its last online presence
// (it relays its ramdisks, it runs plans, the software it runs). The
// engine changes it in its loop and after loading; readers (the API, the
// publishers, the broker's goroutines) read it at any time. It decides no
// lifecycle rule and touches no database: the engine stores the sites.
package sites

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
)

// Site is a registered edge site.
type Site struct {
	Name         string    `json:"name"`
	PasswordHash string    `json:"password_hash"`
	CreatedAt    time.Time `json:"created_at"`
	// Discovery is the site's discovery setting (nil: off, the defaults).
	Discovery *Discovery `json:"discovery,omitempty"`
}

// Discovery is a site's discovery setting: whether its edge agent
// answers network boot for machines that belong to no node, at most how
// many nodes it may discover (MaxNodes), at most how many new machines
// it starts discovering per minute (Rate), and the driver a discovered
// node gets unless an inspection rule sets one (Driver).
type Discovery struct {
	Enabled  bool   `json:"enabled"`
	MaxNodes int    `json:"max_nodes"`
	Rate     int    `json:"rate"`
	Driver   string `json:"driver"`
}

// Defaults of a site's discovery setting.
const (
	DefaultDiscoveryMaxNodes = 50
	DefaultDiscoveryRate     = 10
	DefaultDiscoveryDriver   = "ipmi"
	// MaxDiscoveryMaxNodes and MaxDiscoveryRate bound what may be set.
	MaxDiscoveryMaxNodes = 10000
	MaxDiscoveryRate     = 600
)

// DiscoveryOf is a site's discovery setting with the defaults filled.
func (s *Site) DiscoveryOf() Discovery {
	d := Discovery{MaxNodes: DefaultDiscoveryMaxNodes, Rate: DefaultDiscoveryRate, Driver: DefaultDiscoveryDriver}
	if s.Discovery != nil {
		d = *s.Discovery
	}
	return d
}

// MaxSoftwareLen bounds what is kept of an agent's software name: an
// agent's presence is authenticated, but it is shown to operators as it
// came.
const MaxSoftwareLen = 200

// Book holds the sites. Every method is safe for concurrent use; a *Site
// returned is not changed afterwards (Put replaces it).
type Book struct {
	mu     sync.RWMutex
	sites  map[string]*Site
	online map[string]bool

	// What each agent's last online presence said: an offline presence
	// keeps it (its messages wait in the broker for its return, and a
	// restarted agent says again). In memory only: the broker delivers the
	// retained presence again after a restart.
	relaying, planning, software sync.Map

	// onlineGen moves on whenever a site's online state changes or is
	// forgotten (OnlineGen).
	onlineGen atomic.Uint64
}

// New returns an empty book.
func New() *Book { return &Book{sites: map[string]*Site{}, online: map[string]bool{}} }

// Get returns the site named name.
func (b *Book) Get(name string) (*Site, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	s, ok := b.sites[name]
	return s, ok
}

// Has tells whether the site is registered.
func (b *Book) Has(name string) bool { _, ok := b.Get(name); return ok }

// Put registers s, or replaces the site of its name.
func (b *Book) Put(s *Site) {
	b.mu.Lock()
	b.sites[s.Name] = s
	b.mu.Unlock()
}

// Delete forgets a site: its record, its online state, what its agent
// said.
func (b *Book) Delete(name string) {
	b.mu.Lock()
	delete(b.sites, name)
	delete(b.online, name)
	b.onlineGen.Add(1)
	b.mu.Unlock()
	b.relaying.Delete(name)
	b.planning.Delete(name)
}

// Names are the registered sites' names, sorted.
func (b *Book) Names() []string {
	b.mu.RLock()
	out := make([]string, 0, len(b.sites))
	for s := range b.sites {
		out = append(out, s)
	}
	b.mu.RUnlock()
	sort.Strings(out)
	return out
}

// All are the registered sites, by name.
func (b *Book) All() []*Site {
	b.mu.RLock()
	out := make([]*Site, 0, len(b.sites))
	for _, s := range b.sites {
		out = append(out, s)
	}
	b.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Online tells whether the site's edge agent is online.
func (b *Book) Online(name string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.online[name]
}

// SetOnline records the site's edge agent online or offline and returns
// what it was.
func (b *Book) SetOnline(name string, online bool) (was bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	was, known := b.online[name]
	b.online[name] = online
	if was != online || !known {
		b.onlineGen.Add(1)
	}
	return was
}

// OnlineGen is a number that grows whenever a site's online state
// changes: what Online says of every site is the same as long as it is.
func (b *Book) OnlineGen() uint64 { return b.onlineGen.Load() }

// AnyOnline tells whether some site's edge agent is online.
func (b *Book) AnyOnline() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, on := range b.online {
		if on {
			return true
		}
	}
	return false
}

// OnlineSites are the sites whose online state is known, with it.
func (b *Book) OnlineSites() map[string]bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	out := make(map[string]bool, len(b.online))
	for s, on := range b.online {
		out[s] = on
	}
	return out
}

// NoteRelay records what a site's presence says of its ramdisks, and
// whether its agent runs plans (only one that relays can).
func (b *Book) NoteRelay(site string, online, relay, plans bool) {
	if !online {
		return
	}
	if relay {
		b.relaying.Store(site, true)
	} else {
		b.relaying.Delete(site)
	}
	if relay && plans {
		b.planning.Store(site, true)
	} else {
		b.planning.Delete(site)
	}
}

// Relaying tells whether the site's edge agent relays its ramdisks.
func (b *Book) Relaying(site string) bool { _, ok := b.relaying.Load(site); return ok }

// Plans tells whether the site's edge agent runs plans.
func (b *Book) Plans(site string) bool { _, ok := b.planning.Load(site); return ok }

// NoteSoftware records the software a site's edge agent names in its
// online presence, printable and bounded; an offline presence keeps what
// the last online one said.
func (b *Book) NoteSoftware(site string, online bool, software string) {
	if !online {
		return
	}
	software = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, software)
	if len(software) > MaxSoftwareLen {
		software = software[:MaxSoftwareLen]
	}
	if software == "" {
		b.software.Delete(site)
		return
	}
	b.software.Store(site, software)
}

// Software is what the site's edge agent said it runs, or "".
func (b *Book) Software(site string) string {
	v, _ := b.software.Load(site)
	s, _ := v.(string)
	return s
}
