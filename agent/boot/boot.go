// Package boot is the edge agent's part that prepares and ends a node's
// ramdisk boot, in one place: the boot's credential (what the site
// broker admits, kept hashed in the state folder), its parameters (the
// kernel command line of a qemu-dev VM, the parameters image on virtual
// media, the network boot's command line), the media server and the
// network boot services. The BMC part calls it for a command's boot
// device and power changes (it implements bmc.Booter); the relay asks it
// whether a ramdisk may use the site broker.
package boot

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/lib/ratelog"
	"github.com/bmedge/bmedge/protocol"
)

// DefaultMediaConns and DefaultNetbootHTTPConns are the connection
// budgets of the media server (the BMCs fetch the ISO, each from its own
// address, a few range requests at once) and of the network boot's HTTP
// server (iPXE fetches a script, a kernel and an initramfs per boot). A
// connection is pending until its first request header is read.
var (
	DefaultMediaConns       = netbudget.Limits{MaxConns: 1024, MaxPerSource: 64, MaxPendingPerSource: 16}
	DefaultNetbootHTTPConns = netbudget.Limits{MaxConns: 1024, MaxPerSource: 64, MaxPendingPerSource: 16}
)

// Config configures the boot part.
type Config struct {
	Site string
	Log  *slog.Logger
	// Clock is the clock (default clock.Real): a boot's parameters
	// image is served for paramsTTL of it.
	Clock   clock.Clock
	Ramdisk RamdiskOptions
	Netboot NetbootOptions
	// QEMUBrokerURL and QEMUCmdline: the broker as a qemu-dev VM sees
	// it, and what is appended to its ramdisk's kernel parameters.
	QEMUBrokerURL, QEMUCmdline string
	// CAPin is the pin of the coordinator broker's CA (--ca-file), for
	// the ramdisks' bm.ca when they use an mqtts:// broker other than
	// the site broker.
	CAPin string
	// SiteBroker is the site broker as the ramdisks reach it (ok false
	// without one).
	SiteBroker func() (url, pin string, ok bool)
	// Info is a node's last driver_info (the BMC part's).
	Info func(node string) map[string]any
	// NetworkBoot tells whether a node boots the ramdisk by network boot
	// although its BMC has virtual media (its boot_interface is ipxe or
	// pxe; the BMC part's).
	NetworkBoot func(node string) bool
	// HTTPBoot tells whether a node boots the ramdisk by UEFI HTTP boot
	// (its boot_interface is redfish-https; the BMC part's): its BMC is
	// given the URL of a per-boot ISO instead of virtual media.
	HTTPBoot func(node string) bool
	// PutCred keeps a node's boot credential hash in the state folder
	// (nil: removes it), and waits until it is written.
	PutCred func(node string, hash []byte)
	// Dropped is told when a node's boot ended at the site (the site
	// broker closes the connections of its credential, the relay
	// forgets its beats).
	Dropped func(node string)
	// Discover, when set, is asked whether a PXE client that belongs to
	// no node is to be discovered (agent/discover's Gate), and gives its
	// boot's credential; AdmitDiscovery checks such a ramdisk's
	// credential at the site broker.
	Discover       func(mac net.HardwareAddr) (password string, ok bool)
	AdmitDiscovery func(node, password string) error
}

// Boot is the boot part of one edge agent.
type Boot struct {
	cfg Config
	log *slog.Logger

	mu sync.Mutex
	// creds are each node's ramdisk MQTT credentials from its last boot
	// command; vmBoot holds the nodes whose media may be in their BMC's
	// virtual drives: vmWanted, the next power-on boots the ramdisk from
	// them; vmOwed, that boot is over (it failed, or the coordinator
	// ended it) and only the eject is owed, which the next power-off or
	// boot device disk tries. Kept in the state folder with Keep; restore
	// holds the kept boots' parameters images until Start serves them
	// again.
	creds   map[string][2]string
	secure  map[string]secureArg
	vmBoot  map[string]vmMode
	kept    KeptStore
	restore map[string]vmKept
	// hashes holds the SHA-256 of each node's current boot credential
	// ([]byte), for the site broker.
	hashes sync.Map
	// media serves the ramdisk ISO and the boots' parameters (nil
	// without Ramdisk.ISO); nb is the network boot state (a server only
	// when configured). Both set by Start, never changed after.
	media *mediaServer
	nb    *netbootState
	// discWarn logs what keeps discovery from answering, at a bounded rate.
	discWarn *ratelog.Limiter
}

// New returns the boot part; Start starts its servers.
func New(cfg Config) *Boot {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	cfg.Clock = clock.Or(cfg.Clock)
	if cfg.SiteBroker == nil {
		cfg.SiteBroker = func() (string, string, bool) { return "", "", false }
	}
	if cfg.Info == nil {
		cfg.Info = func(string) map[string]any { return nil }
	}
	if cfg.NetworkBoot == nil {
		cfg.NetworkBoot = func(string) bool { return false }
	}
	if cfg.HTTPBoot == nil {
		cfg.HTTPBoot = func(string) bool { return false }
	}
	if cfg.PutCred == nil {
		cfg.PutCred = func(string, []byte) {}
	}
	if cfg.Dropped == nil {
		cfg.Dropped = func(string) {}
	}
	return &Boot{cfg: cfg, log: cfg.Log, creds: map[string][2]string{}, secure: map[string]secureArg{}, vmBoot: map[string]vmMode{}, nb: newNetbootState(),
		discWarn: ratelog.New(cfg.Log, time.Minute)}
}

// Start starts the media server (with Ramdisk.ISO) and the network boot
// services (with Netboot.Interface); stop ends them.
func (p *Boot) Start(ctx context.Context) (stop func(), err error) {
	stopMedia := func() {}
	if p.cfg.Ramdisk.ISO != "" {
		if _, _, site := p.cfg.SiteBroker(); p.cfg.Ramdisk.BrokerURL == "" && !site {
			return nil, errors.New("--ramdisk-iso needs a broker for the ramdisks: --site-broker-listen (the site broker this agent runs) or --ramdisk-broker-url")
		}
		m, err := newMediaServer(p.cfg.Ramdisk, p.log)
		if err != nil {
			return nil, err
		}
		m.now = p.cfg.Clock.Now
		p.media = m
		p.restoreParams()
		go m.serve()
		stopMedia = m.close
		p.log.Info("media server up: BMCs fetch the ramdisk from "+m.ISOURL(), "listen", m.ln.Addr().String())
	}
	if p.media == nil {
		p.restoreParams() // no media server: the kept images are dropped
	}
	stopNetboot, err := p.startNetboot(ctx)
	if err != nil {
		stopMedia()
		return nil, err
	}
	return func() { stopNetboot(); stopMedia() }, nil
}

// SetCAPin sets the pin of the coordinator broker's CA (before Start).
func (p *Boot) SetCAPin(pin string) { p.cfg.CAPin = pin }

// LoadCreds takes the boot credential hashes kept in the state folder
// (a restarted agent still admits the ramdisk of a boot under way).
func (p *Boot) LoadCreds(hashes map[string][]byte) {
	for node, h := range hashes {
		p.hashes.Store(node, h)
	}
}

// NoteArgs takes what a boot command says of the node's new boot: its
// ramdisk's credential and, for network boot, its MACs.
func (p *Boot) NoteArgs(node string, args map[string]any) {
	pa := protocol.PowerArgsOf(args)
	u, pw := pa.AgentUsername, pa.AgentPassword
	p.mu.Lock()
	p.creds[node] = [2]string{u, pw}
	// The raw value: a secure_boot that is not a bool fails the power-on
	// that would use it, with the value in the error (applySecureBoot).
	if v, ok := args[protocol.ArgSecureBoot]; ok {
		b, isBool := v.(bool)
		p.secure[node] = secureArg{want: b, bad: !isBool, raw: v}
	} else {
		delete(p.secure, node)
	}
	p.mu.Unlock()
	p.noteBootCredential(node, pw)
	p.netbootNoteArgs(node, args)
}

// SetCreds sets a node's ramdisk credentials (tests).
func (p *Boot) SetCreds(node, user, password string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.creds[node] = [2]string{user, password}
}

// noteBootCredential remembers a node's boot credential for the site
// broker (its hash only, also in the state folder so that a restarted
// agent still admits the ramdisk of a boot under way).
func (p *Boot) noteBootCredential(node, password string) {
	sum := sha256.Sum256([]byte(password))
	if old, ok := p.hashes.Load(node); ok && subtle.ConstantTimeCompare(old.([]byte), sum[:]) == 1 {
		return
	}
	p.hashes.Store(node, sum[:])
	p.cfg.PutCred(node, sum[:])
}

// Admit tells whether password is the credential of the node's current
// boot (the site broker's check).
func (p *Boot) Admit(node, password string) error {
	if strings.HasPrefix(node, protocol.DiscoveryNodePrefix) {
		if p.cfg.AdmitDiscovery == nil {
			return errors.New("this edge agent does not discover")
		}
		return p.cfg.AdmitDiscovery(node, password)
	}
	h, ok := p.hashes.Load(node)
	if !ok {
		return errors.New("this edge agent is not booting that node (an earlier boot's credential, or an unknown node)")
	}
	sum := sha256.Sum256([]byte(password))
	if subtle.ConstantTimeCompare(sum[:], h.([]byte)) != 1 {
		return errors.New("not the credential of the node's current boot")
	}
	return nil
}

// Ended forgets a node's boot credential once a command that ends the
// boot succeeded (power off, tear_down_agent): the site broker no longer
// admits that ramdisk, nor lets a connected one publish. done is how many
// of an oob_step command's steps succeeded.
func (p *Boot) Ended(m *protocol.Message, done int) {
	off := false
	switch m.Action {
	case protocol.ActionPower:
		off = !protocol.PowerArgsOf(m.Args).Boots()
	case protocol.ActionOOBStep:
		steps := m.OOBSteps()
		for _, s := range steps[:min(done, len(steps))] {
			off = off || s.Interface+"."+s.Step == "deploy.tear_down_agent"
		}
	}
	if !off {
		return
	}
	p.drop(m.Node)
}

// drop forgets a node's ramdisk boot at the site: its credential is no
// longer admitted, and Dropped is told.
func (p *Boot) drop(node string) {
	if _, ok := p.hashes.LoadAndDelete(node); ok {
		p.cfg.PutCred(node, nil)
	}
	p.cfg.Dropped(node)
}

// End ends a node's ramdisk boot that no power command ended: the
// coordinator says so (end_boot) when an operation failed or was aborted
// and left the node powered on with its ramdisk. The boot's credential
// stops working at this site as it did at the coordinator: the site
// broker no longer admits it and closes the connections that used it,
// the boot's parameters image is gone from the media server, and its
// network boot is disarmed. The virtual media stays inserted until the
// next power-off or boot device disk (ejecting needs the BMC); a power-on
// before then does not boot the ramdisk again.
func (p *Boot) End(node string) {
	if node == "" {
		return
	}
	p.drop(node)
	if p.media != nil {
		p.media.dropParams(node)
	}
	p.mu.Lock()
	_, vm := p.vmBoot[node]
	if vm {
		// The boot is over: a later power-on (the operator's, a deploy's
		// boot_instance) starts the node as it is, not the ramdisk again.
		p.vmBoot[node] = vmOwed
	}
	p.mu.Unlock()
	if vm {
		p.keepVM(node, &vmKept{Ended: true}) // the image is gone; the eject still owed
	}
	if st := p.netbootState(); st != nil && st.srv != nil {
		st.srv.Disarm(node)
	}
	p.log.Info("ramdisk boot ended by the coordinator: its credential no longer works at this site", "node", node)
}

// Forget drops everything of a deleted node's boots: credentials,
// virtual media, network boot.
func (p *Boot) Forget(node string) {
	p.mu.Lock()
	delete(p.creds, node)
	delete(p.secure, node)
	delete(p.vmBoot, node)
	p.mu.Unlock()
	p.keepVM(node, nil)
	if _, ok := p.hashes.LoadAndDelete(node); ok {
		p.cfg.PutCred(node, nil)
	}
	if p.media != nil {
		p.media.dropParams(node)
	}
	_ = p.netbootBootDevice(node, protocol.BootDisk)
	p.netbootForget(node)
}

// NetbootNoted tells whether network boot holds MACs or a fresh boot for
// the node (tests).
func (p *Boot) NetbootNoted(node string) (macs, fresh bool) {
	st := p.netbootState()
	st.mu.Lock()
	defer st.mu.Unlock()
	_, macs = st.macs[node]
	_, fresh = st.fresh[node]
	return macs, fresh
}

// RamdiskCmdline is the kernel command line that tells a qemu-dev node's
// ramdisk who it is and how to reach the broker.
func (p *Boot) RamdiskCmdline(node string) string {
	p.mu.Lock()
	c := p.creds[node]
	p.mu.Unlock()
	url, pin := p.ramdiskBroker(p.cfg.QEMUBrokerURL)
	line := fmt.Sprintf("bm.node=%s bm.site=%s bm.broker=%s bm.user=%s bm.password=%s", node, p.cfg.Site, url, c[0], c[1])
	if pin != "" {
		line += " bm.ca=" + pin
	}
	if p.cfg.QEMUCmdline != "" {
		line += " " + p.cfg.QEMUCmdline
	}
	// A node's own parameters (driver_info qemu_cmdline, e.g. a static
	// address) come last, so they win over the agent's.
	if extra, _ := p.cfg.Info(node)["qemu_cmdline"].(string); extra != "" {
		line += " " + extra
	}
	return line
}

// ramdiskBroker is the broker URL and CA pin a booting ramdisk is given:
// the site broker when there is one, else fallback (the broker the
// operator named for the ramdisks) with the pin of the agent's CA file.
func (p *Boot) ramdiskBroker(fallback string) (url, pin string) {
	if url, pin, ok := p.cfg.SiteBroker(); ok {
		return url, pin
	}
	if strings.HasPrefix(fallback, "mqtts://") {
		pin = p.cfg.CAPin
	}
	return fallback, pin
}

// SetBootDevice and SetPower: see vmedia.go (bmc.Booter).
func (p *Boot) SetBootDevice(ctx context.Context, node string, b drivers.BMC, device string) error {
	return p.setBootDevice(ctx, node, b, device)
}

// SetPower switches a node's power (see setPower).
func (p *Boot) SetPower(ctx context.Context, node string, b drivers.BMC, state string) error {
	return p.setPower(ctx, node, b, state)
}
