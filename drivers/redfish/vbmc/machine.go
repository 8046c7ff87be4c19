package vbmc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
)

// ResetType is a Redfish ComputerSystem reset type.
type ResetType string

// The reset types a vBMC system offers (ResetType@Redfish.AllowableValues).
const (
	ResetOn               ResetType = "On"
	ResetForceOff         ResetType = "ForceOff"
	ResetGracefulShutdown ResetType = "GracefulShutdown"
	ResetForceRestart     ResetType = "ForceRestart"
	ResetGracefulRestart  ResetType = "GracefulRestart"
	ResetPowerCycle       ResetType = "PowerCycle"
)

// ResetTypes lists the reset types in the order the system advertises them.
var ResetTypes = []ResetType{ResetOn, ResetForceOff, ResetGracefulShutdown, ResetForceRestart, ResetGracefulRestart, ResetPowerCycle}

// Boot source override targets, as Redfish spells them.
const (
	BootNone      = "None"
	BootPxe       = "Pxe"
	BootHdd       = "Hdd"
	BootCd        = "Cd"
	BootBiosSetup = "BiosSetup"
	// BootUefiHttp: UEFI HTTP boot of the Boot object's HttpBootUri.
	BootUefiHttp = "UefiHttp"
)

// MaxHTTPBootBytes bounds the image a UEFI HTTP boot fetches (firmware
// loads it into a RAM disk).
const MaxHTTPBootBytes = 2 << 30

// Boot source override modes.
const (
	ModeUEFI   = "UEFI"
	ModeLegacy = "Legacy"
)

// Boot source override enablement.
const (
	OverrideDisabled   = "Disabled"
	OverrideOnce       = "Once"
	OverrideContinuous = "Continuous"
)

// Boot is what a machine starts from at its next start: the BMC has
// already resolved the override (a disabled override means the disk).
type Boot struct {
	Device string // BootPxe, BootHdd, BootCd or BootBiosSetup
	Mode   string // ModeUEFI or ModeLegacy
	// SecureBoot: the firmware boots with UEFI Secure Boot on (UEFI
	// mode only; the SecureBoot resource's SecureBootEnable).
	SecureBoot bool
	// HTTPBootURI: for Device BootUefiHttp, the image the firmware
	// fetches (over HTTP or HTTPS, from that URL only) and boots as a CD
	// from a RAM disk; HTTPBootSize and HTTPBootSHA256 are what a
	// MemoryMachine that fetches media read of it.
	HTTPBootURI    string
	HTTPBootSize   int64
	HTTPBootSHA256 string
}

// Machine is the computer behind a vBMC system. The vBMC calls it one
// operation at a time per system; PoweredOn may be called at any time.
type Machine interface {
	// Power applies a reset type. Starting uses the Boot last given to SetBoot.
	Power(ctx context.Context, action ResetType) error
	// PoweredOn reports whether the machine is running.
	PoweredOn() bool
	// SetBoot tells the machine what to start from next time it starts.
	SetBoot(ctx context.Context, boot Boot) error
	// InsertMedia attaches the image at url (http or https) to a
	// virtual media slot (SlotCD or SlotUSB).
	InsertMedia(ctx context.Context, slot Slot, url string) error
	// EjectMedia detaches the slot's image, if any.
	EjectMedia(ctx context.Context, slot Slot) error
}

// Slot is one of a BMC's virtual media devices. Real BMCs offer a virtual
// CD and a removable disk or USB stick (iDRAC's VirtualMedia/1 and /2,
// iLO's CD and USBStick); both reach the host as USB devices.
type Slot string

// The vBMC's virtual media slots.
const (
	// SlotCD is a virtual CD/DVD, the one a machine can boot from.
	SlotCD Slot = "CD"
	// SlotUSB is a virtual USB stick (read-only): per-boot data such as
	// the ramdisk's parameters travels on it, beside the shared CD.
	SlotUSB Slot = "USB"
)

// Slots lists the slots in the order the manager shows them.
var Slots = []Slot{SlotCD, SlotUSB}

func knownSlot(s Slot) error {
	for _, x := range Slots {
		if s == x {
			return nil
		}
	}
	return fmt.Errorf("no virtual media slot %q (slots: CD, USB)", s)
}

// attached is what a MemoryMachine holds in one slot.
type attached struct {
	url    string
	size   int64
	sha256 string
}

// checkMediaURL accepts the transfer protocols a vBMC can fetch: real
// BMCs also offer NFS and CIFS, which the labs here have no use for.
func checkMediaURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("image %q is not an http or https URL; this BMC fetches virtual media over HTTP(S) only", raw)
	}
	return nil
}

// MemoryOptions shape a MemoryMachine.
type MemoryOptions struct {
	// FetchMedia makes InsertMedia download the image (and fail when it
	// cannot), so that a test sees what a real BMC would have read.
	FetchMedia bool
	// HTTPClient fetches media (http.DefaultClient if nil).
	HTTPClient *http.Client
	// IgnoreGraceful makes the machine ignore GracefulShutdown and
	// GracefulRestart, as an operating system without ACPI handling does.
	IgnoreGraceful bool
}

// MemoryMachine is a machine that exists only in memory: for unit tests
// and for benchmarks with many BMCs. It records every start.
type MemoryMachine struct {
	opts MemoryOptions

	mu         sync.Mutex
	on         bool
	next       Boot
	starts     []Boot
	media      map[Slot]attached
	powerCalls []ResetType
}

// NewMemoryMachine returns a powered-off machine that boots its disk.
func NewMemoryMachine(opts MemoryOptions) *MemoryMachine {
	return &MemoryMachine{opts: opts, next: Boot{Device: BootHdd, Mode: ModeUEFI}, media: map[Slot]attached{}}
}

// Power implements Machine.
func (m *MemoryMachine) Power(ctx context.Context, action ResetType) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.powerCalls = append(m.powerCalls, action)
	start := func() {
		m.on = true
		m.starts = append(m.starts, m.next)
	}
	switch action {
	case ResetOn:
		if !m.on {
			start()
		}
	case ResetForceOff:
		m.on = false
	case ResetGracefulShutdown:
		if !m.opts.IgnoreGraceful {
			m.on = false
		}
	case ResetForceRestart, ResetPowerCycle:
		start()
	case ResetGracefulRestart:
		if !m.on || !m.opts.IgnoreGraceful {
			start()
		}
	default:
		return fmt.Errorf("memory machine: unknown reset type %q", action)
	}
	return nil
}

// PoweredOn implements Machine.
func (m *MemoryMachine) PoweredOn() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.on
}

// SetBoot implements Machine. A UEFI HTTP boot is fetched here (with
// FetchMedia), as the firmware does at the start that follows.
func (m *MemoryMachine) SetBoot(ctx context.Context, b Boot) error {
	if b.Device == BootUefiHttp && m.opts.FetchMedia {
		h := sha256.New()
		n, err := fetchHTTPBoot(ctx, m.opts.HTTPClient, b.HTTPBootURI, h)
		if err != nil {
			return err
		}
		b.HTTPBootSize, b.HTTPBootSHA256 = n, hex.EncodeToString(h.Sum(nil))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next = b
	return nil
}

// InsertMedia implements Machine.
func (m *MemoryMachine) InsertMedia(ctx context.Context, slot Slot, rawURL string) error {
	if err := knownSlot(slot); err != nil {
		return err
	}
	if err := checkMediaURL(rawURL); err != nil {
		return err
	}
	var size int64
	var sum string
	if m.opts.FetchMedia {
		c := m.opts.HTTPClient
		if c == nil {
			c = http.DefaultClient
		}
		h := sha256.New()
		n, err := fetch(ctx, c, rawURL, h)
		if err != nil {
			return err
		}
		size, sum = n, hex.EncodeToString(h.Sum(nil))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.media[slot] = attached{url: rawURL, size: size, sha256: sum}
	return nil
}

// EjectMedia implements Machine.
func (m *MemoryMachine) EjectMedia(ctx context.Context, slot Slot) error {
	if err := knownSlot(slot); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.media, slot)
	return nil
}

// Starts returns every start of the machine, oldest first, with what it
// booted from.
func (m *MemoryMachine) Starts() []Boot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Boot(nil), m.starts...)
}

// PowerCalls returns every reset type the BMC applied, oldest first.
func (m *MemoryMachine) PowerCalls() []ResetType {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]ResetType(nil), m.powerCalls...)
}

// Media returns the CD's image URL ("" if none) and, when the machine
// fetches media, its size and SHA-256.
func (m *MemoryMachine) Media() (url string, size int64, sha256hex string) {
	return m.MediaIn(SlotCD)
}

// MediaIn is Media for any slot.
func (m *MemoryMachine) MediaIn(slot Slot) (url string, size int64, sha256hex string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	a := m.media[slot]
	return a.url, a.size, a.sha256
}

// fetch copies the body of a GET of rawURL into w.
func fetch(ctx context.Context, c *http.Client, rawURL string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, fmt.Errorf("fetch image %s: %w", rawURL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("fetch image %s: HTTP %s", rawURL, resp.Status)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("fetch image %s: %w", rawURL, err)
	}
	return n, nil
}

// fetchHTTPBoot is the firmware's UEFI HTTP boot download: the URL given
// only (no redirect followed), http or https, at most MaxHTTPBootBytes.
func fetchHTTPBoot(ctx context.Context, c *http.Client, rawURL string, w io.Writer) (int64, error) {
	if rawURL == "" {
		return 0, errors.New("UEFI HTTP boot: the Boot object's HttpBootUri is empty")
	}
	if err := checkMediaURL(rawURL); err != nil {
		return 0, fmt.Errorf("UEFI HTTP boot: %w", err)
	}
	if c == nil {
		c = http.DefaultClient
	}
	nc := *c
	nc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	lw := &capWriter{w: w, left: MaxHTTPBootBytes}
	n, err := fetch(ctx, &nc, rawURL, lw)
	if err != nil {
		return n, fmt.Errorf("UEFI HTTP boot: %w", err)
	}
	return n, nil
}

// capWriter fails once more than left bytes are written.
type capWriter struct {
	w    io.Writer
	left int64
}

func (c *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("the image is over %d bytes", MaxHTTPBootBytes)
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}
