package boot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/bootmedia"
	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/lib/ratelog"
	"github.com/bmedge/bmedge/protocol"
)

// RamdiskOptions configure how the edge agent boots the ramdisk on nodes
// whose BMC has virtual media (redfish): it serves the shared ramdisk ISO
// and, for each boot, a small image of that boot's parameters over HTTP
// on the site network; the BMC fetches both.
type RamdiskOptions struct {
	// ISO is the bootable ramdisk image (make ramdisk:
	// build/ramdisk/bmramdisk.iso). Without it, nodes that boot from
	// virtual media cannot boot the ramdisk.
	ISO string
	// BrokerURL is the MQTT broker as the ramdisks reach it.
	BrokerURL string
	// Params are kernel-style parameters added to every boot's
	// parameters (say bm.gw= and bm.dns= of the site network); a node's
	// driver_info kernel_append_params come after them.
	Params string
	// Listen is the address of the media server (host:port on the site
	// network, reachable by the BMCs).
	Listen string
	// URL is the media server as the BMCs reach it (default http://Listen).
	URL string
	// Conns are the media server's connection budgets (fields <= 0:
	// DefaultMediaConns').
	Conns netbudget.Limits
}

// paramsTTL bounds how long a boot's parameters image is served when no
// power-off or boot-device change ends the boot first.
const paramsTTL = 2 * time.Hour

// mediaServer serves the ramdisk ISO to everyone who asks (it holds no
// secret) and each boot's parameters image (which holds the boot's MQTT
// credentials) under a random 128-bit name, only until the boot ends.
type mediaServer struct {
	now  func() time.Time
	iso  string
	base string
	log  *slog.Logger
	srv  *http.Server
	ln   net.Listener

	mu     sync.Mutex
	images map[string]*paramsImage // by token
	byNode map[string]string       // node → token

	// refused logs the requests for unknown or ended boot parameters at
	// a bounded rate: anybody on the site network may ask for names.
	refusedOnce sync.Once
	refused     *ratelog.Limiter
}

type paramsImage struct {
	node    string
	data    []byte
	created time.Time
	// iso: a UEFI HTTP boot's ISO (boot.iso), not a parameters image.
	iso bool
}

func newMediaServer(opts RamdiskOptions, log *slog.Logger) (*mediaServer, error) {
	st, err := os.Stat(opts.ISO)
	if err != nil {
		return nil, fmt.Errorf("ramdisk ISO: %w (build it with make ramdisk)", err)
	}
	if st.IsDir() || st.Size() < 32*1024 {
		return nil, fmt.Errorf("ramdisk ISO %s is not an ISO image (%d bytes); build it with make ramdisk", opts.ISO, st.Size())
	}
	if opts.Listen == "" {
		return nil, errors.New("--media-listen is required with --ramdisk-iso: the address on the site network where the BMCs fetch the ramdisk")
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("media server: %w", err)
	}
	base := strings.TrimSuffix(opts.URL, "/")
	if base == "" {
		base = "http://" + ln.Addr().String()
	}
	ln = netbudget.Default().Wrap(ln, netbudget.Options{Name: "media", Limits: opts.Conns.Or(DefaultMediaConns), Log: log})
	m := &mediaServer{now: time.Now, iso: opts.ISO, base: base, log: log, ln: ln, images: map[string]*paramsImage{}, byNode: map[string]string{}}
	m.srv = &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 16 << 10, ConnState: netbudget.ConnState(nil)}
	return m, nil
}

func (m *mediaServer) serve() {
	if err := m.srv.Serve(m.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		m.log.Error("media server stopped", "err", err)
	}
}

func (m *mediaServer) close() { _ = m.srv.Close() }

// ISOURL is where the BMCs fetch the ramdisk ISO.
func (m *mediaServer) ISOURL() string { return m.base + "/ramdisk.iso" }

// ServeHTTP answers GET and HEAD (with ranges: BMCs read media in pieces).
func (m *mediaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch {
	case r.URL.Path == "/ramdisk.iso":
		f, err := os.Open(m.iso)
		if err != nil {
			m.log.Error("media server: ramdisk ISO", "err", err)
			http.Error(w, "ramdisk ISO unavailable", http.StatusInternalServerError)
			return
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			http.Error(w, "ramdisk ISO unavailable", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "ramdisk.iso", st.ModTime(), f)
	case strings.HasPrefix(r.URL.Path, "/boot/") && (strings.HasSuffix(r.URL.Path, "/params.img") || strings.HasSuffix(r.URL.Path, "/boot.iso")):
		name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		token := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/boot/"), "/"+name)
		m.mu.Lock()
		img := m.images[token]
		if img != nil && img.iso != (name == "boot.iso") {
			img = nil
		}
		if img != nil && m.now().Sub(img.created) > paramsTTL {
			m.dropLocked(img.node)
			img = nil
		}
		m.mu.Unlock()
		if img == nil {
			// The log never shows the name: it is the image's password.
			// One line per interval, with the count (ratelog).
			m.refusedOnce.Do(func() { m.refused = ratelog.New(m.log, 0) })
			m.refused.Warn("unknown params", "media server: unknown or ended boot parameters", "remote", r.RemoteAddr)
			http.NotFound(w, r)
			return
		}
		m.log.Debug("media server: boot parameters served", "node", img.node, "remote", r.RemoteAddr)
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Cache-Control", "no-store")
		http.ServeContent(w, r, name, img.created, bytes.NewReader(img.data))
	default:
		http.NotFound(w, r)
	}
}

// addParams makes the parameters image of a node's new boot and returns
// its URL and what the state folder keeps of it; the node's previous
// boot's image is no longer served.
func (m *mediaServer) addParams(node, params string) (string, vmKept, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", vmKept{}, err
	}
	k := vmKept{Token: hex.EncodeToString(b), Params: params, Created: m.now()}
	if err := m.restoreParams(node, k.Token, k.Params, k.Created); err != nil {
		return "", vmKept{}, err
	}
	return m.base + "/boot/" + k.Token + "/params.img", k, nil
}

// restoreParams serves a node's parameters image under token, made at
// created (a boot kept in the state folder, or a new one); the node's
// previous boot's image is no longer served.
func (m *mediaServer) restoreParams(node, token, params string, created time.Time) error {
	data, err := bootmedia.ParamsImage(params)
	if err != nil {
		return fmt.Errorf("boot parameters of node %s: %w", node, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked(node)
	m.images[token] = &paramsImage{node: node, data: data, created: created}
	m.byNode[node] = token
	return nil
}

// dropParams stops serving a node's parameters image: its boot ended.
func (m *mediaServer) dropParams(node string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dropLocked(node)
}

func (m *mediaServer) dropLocked(node string) {
	if t, ok := m.byNode[node]; ok {
		delete(m.images, t)
		delete(m.byNode, node)
	}
}

// secureBooter is a BMC that turns UEFI Secure Boot on and off for the
// system's next boot (redfish: the SecureBoot resource).
type secureBooter interface {
	SetSecureBoot(ctx context.Context, enable bool) error
}

// secureArg is what a node's last boot command said of Secure Boot
// (protocol.ArgSecureBoot), until the power-on that uses it.
type secureArg struct {
	want, bad bool
	raw       any
}

// applySecureBoot turns Secure Boot on (or off) on the node's BMC before
// a power-on or reboot whose command says secure_boot (the node asked
// for it with Ironic's capability secure_boot:true). Only BMCs that can
// (secureBooter) are asked: network boot gives the firmware of the
// others the signed chain, whose Secure Boot the operator sets. A BMC
// that cannot turn it on fails the command before anything boots: the
// node never boots unsigned where it asked for Secure Boot.
func (p *Boot) applySecureBoot(ctx context.Context, node string, b any) error {
	p.mu.Lock()
	a, ok := p.secure[node]
	delete(p.secure, node) // one power command's
	p.mu.Unlock()
	if !ok {
		return nil
	}
	if a.bad {
		return fmt.Errorf("the power command's %s is %v, not true or false", protocol.ArgSecureBoot, a.raw)
	}
	sb, can := b.(secureBooter)
	if !can {
		return nil
	}
	if err := sb.SetSecureBoot(ctx, a.want); err != nil {
		if a.want {
			return fmt.Errorf("boot with UEFI Secure Boot: %w", err)
		}
		return fmt.Errorf("turn UEFI Secure Boot off: %w", err)
	}
	return nil
}

// mediaBooter is a BMC that boots the ramdisk from virtual media.
type mediaBooter interface {
	BootFromMedia(ctx context.Context, isoURL, paramsURL string) error
	EjectBootMedia(ctx context.Context) error
}

// isoBooter is a BMC that boots a given ISO from its virtual CD, kept
// as the boot device (redfish).
type isoBooter interface {
	BootISO(ctx context.Context, isoURL string) error
}

// BootISO boots a node from a given ISO (a ramdisk deploy's boot_iso,
// served by the site's image cache): the BMC inserts it as the virtual
// CD and keeps the CD as the boot device, as Ironic's redfish virtual
// media boot does for the ramdisk deploy interface; the next power-on
// boots it. It is no ramdisk boot: power-offs leave it inserted (an
// operator's power cycle boots the ISO again) until EjectISO. A ramdisk
// boot's media still owed an eject are ejected first.
func (p *Boot) BootISO(ctx context.Context, node string, b drivers.BMC, isoURL string) error {
	ib, ok := b.(isoBooter)
	mb, _ := b.(mediaBooter)
	if !ok || mb == nil {
		return fmt.Errorf("the BMC of node %s has no virtual media to boot an ISO from; the ramdisk deploy interface needs a Redfish BMC with a virtual CD", node)
	}
	if p.owesEject(node) {
		if p.media != nil {
			p.media.dropParams(node)
		}
		if !p.ejectOrWarn(ctx, node, mb, "the boot ISO is inserted next") {
			return fmt.Errorf("the ramdisk's virtual media of node %s did not eject; the boot ISO was not inserted", node)
		}
	}
	return ib.BootISO(ctx, isoURL)
}

// EjectISO ejects a node's virtual media (the ramdisk deploy's tear
// down): the boot ISO, and a ramdisk boot's media if any are owed.
func (p *Boot) EjectISO(ctx context.Context, node string, b drivers.BMC) error {
	mb, ok := b.(mediaBooter)
	if !ok {
		return fmt.Errorf("the BMC of node %s has no virtual media", node)
	}
	if p.media != nil {
		p.media.dropParams(node)
	}
	if err := mb.EjectBootMedia(ctx); err != nil {
		return err
	}
	p.mu.Lock()
	_, owed := p.vmBoot[node]
	delete(p.vmBoot, node)
	p.mu.Unlock()
	if owed {
		p.keepVM(node, nil)
	}
	return nil
}

// bootParams are the kernel-style parameters of a node's ramdisk boot: who
// it is, where its broker is and with what credential, the CA pin, then
// the site's and the node's own additions (driver_info
// kernel_append_params, as Ironic names them), which win.
func (p *Boot) bootParams(node string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.creds[node]
	o := p.cfg.Ramdisk
	url, pin := p.ramdiskBroker(o.BrokerURL)
	line := fmt.Sprintf("bm.node=%s bm.site=%s bm.broker=%s bm.user=%s bm.password=%s", node, p.cfg.Site, url, c[0], c[1])
	if pin != "" {
		line += " bm.ca=" + pin
	}
	if o.Params != "" {
		line += " " + o.Params
	}
	if extra, _ := p.cfg.Info(node)["kernel_append_params"].(string); extra != "" {
		line += " " + extra
	}
	return line
}

// setBootDevice sets a node's boot device. For a BMC with virtual media,
// "pxe" (the coordinator's "boot the ramdisk") is remembered and done at
// the next power-on, when the boot's credentials are known; "disk" ejects
// the ramdisk's media first. A node whose boot interface is network boot
// (ipxe, pxe: Config.NetworkBoot) is booted as one without virtual media
// is: the BMC's boot device itself is set (Redfish's boot source
// override Pxe) and the network boot is armed at the power-on.
func (p *Boot) setBootDevice(ctx context.Context, node string, b interface {
	SetBootDevice(context.Context, string) error
}, device string) error {
	mb, ok, err := p.bootMedia(node, b)
	if err != nil {
		return err
	}
	if ok && p.cfg.NetworkBoot(node) {
		// The media of an earlier virtual media boot (before the
		// node's boot interface changed) are ejected first.
		if p.owesEject(node) {
			if p.media != nil {
				p.media.dropParams(node)
			}
			p.ejectOrWarn(ctx, node, mb, "boot device "+device+" set")
		}
		ok = false
	}
	if !ok {
		// Network boot serves the BMCs without virtual media (ipmi);
		// simulated and qemu-dev nodes boot the ramdisk by themselves.
		if _, self := b.(drivers.SelfBooter); !self {
			if err := p.netbootBootDevice(node, device); err != nil {
				return err
			}
		}
		return b.SetBootDevice(ctx, device)
	}
	if device == protocol.BootPXE {
		if p.media == nil {
			return fmt.Errorf("this edge agent cannot boot the ramdisk on node %s: its BMC boots from virtual media and the agent serves no ramdisk ISO; start the agent with --ramdisk-iso (make ramdisk builds build/ramdisk/bmramdisk.iso), --media-listen and --ramdisk-broker-url", node)
		}
		p.mu.Lock()
		was := p.vmBoot[node]
		p.vmBoot[node] = vmWanted
		p.mu.Unlock()
		if was != vmWanted {
			p.keepVM(node, &vmKept{}) // before any media is inserted
		}
		return nil
	}
	if p.owesEject(node) {
		if p.media != nil {
			p.media.dropParams(node)
		}
		// An eject that fails does not keep the node from booting its
		// disk: the boot device is set all the same, the media stay
		// recorded as inserted (the next power-off or boot device disk
		// ejects again) and the command's result says so.
		p.ejectOrWarn(ctx, node, mb, "boot device disk set")
	}
	return b.SetBootDevice(ctx, device)
}

// owesEject tells whether a node's media may be in its BMC's virtual
// drives (a virtual-media boot, under way or over).
func (p *Boot) owesEject(node string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.vmBoot[node]
	return ok
}

// ejectOrWarn ejects a node's boot media. Done, the node no longer owes
// an eject. Failed, the boot is recorded as over with its media still
// inserted (kept in the state folder: a restarted agent tries again) and
// the command's result carries a warning naming the BMC's answer: done
// says what the command did all the same.
func (p *Boot) ejectOrWarn(ctx context.Context, node string, mb mediaBooter, done string) bool {
	if err := mb.EjectBootMedia(ctx); err != nil {
		p.mu.Lock()
		p.vmBoot[node] = vmOwed
		p.mu.Unlock()
		p.keepVM(node, &vmKept{Ended: true})
		p.log.Warn("the ramdisk's virtual media did not eject; recorded as still inserted", "node", node, "err", err)
		drivers.Warn(ctx, fmt.Sprintf("%s, but the ramdisk's virtual media did not eject: %v; they are recorded as still inserted, and the next power off or boot device disk ejects them again", done, err))
		return false
	}
	p.mu.Lock()
	delete(p.vmBoot, node)
	p.mu.Unlock()
	p.keepVM(node, nil)
	return true
}

// softOff asks the node's operating system to shut down through its BMC
// and forces the power off when it has not within 60 % of the command's
// time left (Ironic's soft power off). BMCs of the simulated and qemu-dev
// drivers have no operating system to ask: they are switched off.
func (p *Boot) softOff(ctx context.Context, node string, b interface {
	SetPower(context.Context, string) error
}) error {
	timeout := 5 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl) * 6 / 10
	}
	switch s := b.(type) {
	case interface {
		SoftPowerOff(context.Context, time.Duration) (bool, error)
	}:
		forced, err := s.SoftPowerOff(ctx, timeout)
		if forced {
			p.log.Info("soft power off: the OS did not shut down in time; powered off by force", "node", node, "timeout", timeout.Round(time.Second))
		}
		return err
	case interface {
		SoftPowerOff(context.Context, time.Duration) error
	}:
		return s.SoftPowerOff(ctx, timeout)
	}
	return b.SetPower(ctx, protocol.PowerOff)
}

// setPower switches a node's power. A power-on of a node that is to boot
// the ramdisk from virtual media first inserts the ISO and this boot's
// parameters and sets a one-time boot from the CD; a power-off ends the
// boot and ejects them.
func (p *Boot) setPower(ctx context.Context, node string, b interface {
	SetPower(context.Context, string) error
}, state string) error {
	switch state {
	case protocol.PowerSoftOff, protocol.PowerSoftReboot:
		if err := p.softOff(ctx, node, b); err != nil {
			return err
		}
		// Off now: a soft power off goes on as a power off (which ends a
		// ramdisk boot's media), a soft reboot as a power on.
		if state == protocol.PowerSoftReboot {
			state = protocol.PowerOn
		} else {
			state = protocol.PowerOff
		}
	}
	mb, ok, err := p.bootMedia(node, b)
	if err != nil {
		return err
	}
	// netboot: a BMC with virtual media, a node that boots by network
	// boot (its boot interface ipxe or pxe).
	netboot := ok && p.cfg.NetworkBoot(node)
	p.mu.Lock()
	mode := p.vmBoot[node]
	p.mu.Unlock()
	if !ok {
		mode = 0
	}
	if mode != 0 && protocol.PowerIsOff(state) {
		// The boot ends: its parameters image is no longer served and
		// its media are ejected (also by an agent restarted since the
		// boot began, from the state folder; also when it now serves no
		// ramdisk ISO). The power-off is what was asked: an eject that
		// fails after it is a warning of its result, not its failure,
		// and the media stay recorded as inserted.
		if p.media != nil {
			p.media.dropParams(node)
		}
		p.mu.Lock()
		p.vmBoot[node] = vmOwed
		p.mu.Unlock()
		p.keepVM(node, &vmKept{Ended: true})
		if netboot {
			_ = p.netbootPower(node, state) // disarms
		}
		if err := b.SetPower(ctx, state); err != nil {
			return err
		}
		p.ejectOrWarn(ctx, node, mb, "powered off")
		return nil
	}
	if err := p.applySecureBoot(ctx, node, b); err != nil {
		return err
	}
	vm := !netboot && mode == vmWanted && p.media != nil // else a power-on with no ramdisk ISO to boot: as before
	if !vm {
		// Network boot: BMCs without virtual media that do not boot the
		// ramdisk by themselves (ipmi), and nodes whose boot interface
		// is network boot.
		if _, self := b.(drivers.SelfBooter); (!ok || netboot) && !self {
			if err := p.netbootPower(node, state); err != nil {
				return err
			}
		}
		return b.SetPower(ctx, state)
	}
	isoURL := p.media.ISOURL()
	var paramsURL string
	var k vmKept
	if _, http := mb.(httpMedia); http {
		// UEFI HTTP boot: one ISO of this boot, its parameters inside.
		isoURL, k, err = p.media.addHTTPBoot(ctx, node, p.bootParams(node))
	} else {
		paramsURL, k, err = p.media.addParams(node, p.bootParams(node))
	}
	if err != nil {
		return err
	}
	// Kept before the BMC inserts anything: a restarted agent serves the
	// image until the boot ends, and ejects then.
	p.keepVM(node, &k)
	if err := mb.BootFromMedia(ctx, isoURL, paramsURL); err != nil {
		// This boot is over before it began: whatever the BMC took of
		// its media is ejected now, or recorded as still inserted.
		p.media.dropParams(node)
		err = fmt.Errorf("boot the ramdisk from virtual media: %w", err)
		if eerr := mb.EjectBootMedia(ctx); eerr != nil {
			p.mu.Lock()
			p.vmBoot[node] = vmOwed
			p.mu.Unlock()
			p.keepVM(node, &vmKept{Ended: true})
			return fmt.Errorf("%w; the ramdisk's virtual media may still be inserted (eject: %v): the next power off or boot device disk ejects them again", err, eerr)
		}
		p.mu.Lock()
		delete(p.vmBoot, node)
		p.mu.Unlock()
		p.keepVM(node, nil)
		return fmt.Errorf("%w; the node's power was not changed and its virtual media were ejected", err)
	}
	return b.SetPower(ctx, state)
}
