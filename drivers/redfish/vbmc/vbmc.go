// Package vbmc is a virtual Redfish BMC for tests and labs, never for
// production: it keeps its users and sessions in memory, compares
// passwords as given, and serves whatever machine it is handed.
//
// A BMC is an http.Handler for the Redfish tree under /redfish/v1. It
// serves one or more systems, each backed by a Machine: a MemoryMachine
// (tests, benchmarks) or a QEMUMachine (a VM driven over QMP). Each
// system has its own Manager with a virtual CD. Both shapes of a lab are
// possible: one BMC per machine, each on its own listener (Serve), as a
// rack of real servers looks, with per-BMC sessions, faults and
// credentials; or one BMC with many systems on one listener, as
// sushy-tools' emulator does, where clients pick a system by its ID
// (redfish_system_id). A benchmark with 200 BMCs can do either; 200
// listeners on 127.0.0.1 are cheap.
//
// What it implements is the surface that gofish and python3-sushy both
// accept (see RECIPES.md): a service root without authentication,
// sessions (with a limit), Basic and token authentication, systems with
// power, boot override and a reset action, BIOS attributes with pending
// settings applied at the next start, managers with a reset action and a
// virtual CD, a SecureBoot resource whose SecureBootEnable applies at the
// next UEFI start (a QEMUMachine then runs OVMF's Secure Boot firmware
// with Microsoft's keys). Besides (firmware.go, storage.go, registry.go): an
// UpdateService with SimpleUpdate (the BMC fetches ImageURI) and a
// multipart push, whose tasks (TaskService, 202 while running) end
// Completed or Exception; a FirmwareInventory (BIOS, BMC, NIC) whose
// versions change at the reset each needs; a RAID controller with drives
// and Volumes (RAID0/1/10, POST and DELETE); a BIOS attribute registry
// that Bios/Settings PATCHes are checked against. Faults can be injected
// per BMC: slow answers, 5xx answers, power changes that take a while to
// show. Errors have Redfish's shape.
package vbmc

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Config describes one BMC.
type Config struct {
	// Username and Password are the BMC's one account.
	Username, Password string
	// Systems are the machines behind this BMC (at least one).
	Systems []SystemConfig
	// SessionLimit is how many sessions may be open at once (default 4,
	// as small BMCs allow); one more is refused with 503 and Redfish's
	// SessionLimitExceeded.
	SessionLimit int
	// SessionTimeout closes a session unused for this long (default 30 min).
	SessionTimeout time.Duration
	// ResetDowntime is how long the BMC answers 503 after a Manager.Reset,
	// as a rebooting BMC is away (default 0).
	ResetDowntime time.Duration
	// Name is the service root's Name (default "bmedge virtual BMC").
	Name string
	// Logger receives what the BMC does (never a password); default discards.
	Logger *slog.Logger
	// NoSimpleUpdate leaves UpdateService.SimpleUpdate out, so that
	// clients must push images (MultipartHttpPushUri), as some BMCs do.
	NoSimpleUpdate bool
	// UpdateDelay is how long an update task runs once it has the image
	// (default 200 ms).
	UpdateDelay time.Duration
}

// SystemConfig describes one system behind a BMC.
type SystemConfig struct {
	// ID is the system's Id in its URL (default "1", or "system-N" when
	// the BMC has several).
	ID string
	// Machine runs the system (required).
	Machine Machine
	// BiosAttributes are the BIOS defaults (DefaultBiosAttributes if nil).
	BiosAttributes map[string]any
	// BootMode is the initial BootSourceOverrideMode (default UEFI).
	BootMode string
	// CPUs and MemoryGiB are reported in the system's summaries (default 2 and 4).
	CPUs, MemoryGiB int
	// Firmware are the initial versions of bios, bmc and nic
	// (DefaultFirmware for those not given).
	Firmware map[string]string
	// DriveCount and DriveBytes describe the RAID controller's drives
	// (default 4 of 100 GiB).
	DriveCount int
	DriveBytes int64
	// MACs are the system's EthernetInterfaces' addresses; without any
	// the system links no EthernetInterfaces, as some BMCs' trees do.
	MACs []string
	// NoSecureBoot leaves the SecureBoot resource out, as BMCs without
	// UEFI Secure Boot (or older Redfish) do.
	NoSecureBoot bool
}

// DefaultBiosAttributes returns a small, typical set of BIOS attributes.
func DefaultBiosAttributes() map[string]any {
	return map[string]any{
		"ProcVirtualization": "Enabled",
		"ProcTurboMode":      "Enabled",
		"SriovGlobalEnable":  "Disabled",
		"PxeDev1EnDis":       "Enabled",
		"NumLock":            "On",
		"TimeZone":           "UTC",
		"BootDelaySeconds":   float64(0),
		"SecureBootEnable":   false,
		"SystemServiceTag":   "VBMC0001",
	}
}

// Faults are the misbehaviours injected into one BMC.
type Faults struct {
	// Latency delays every answer.
	Latency time.Duration
	// FailStatus (a 5xx code) is answered to the next FailCount requests;
	// a negative FailCount fails every request until the faults change.
	FailStatus int
	FailCount  int
	// PowerDelay makes a power action take this long to happen (and to
	// show in PowerState): the reset is accepted at once, as real BMCs do.
	PowerDelay time.Duration
	// InsertMediaStatus (a 4xx or 5xx code) answers every InsertMedia:
	// virtual media that cannot be inserted (a BMC without the licence
	// for it, a share it cannot reach). EjectMediaStatus answers every
	// EjectMedia of a slot that holds an image: media that do not eject.
	InsertMediaStatus int
	EjectMediaStatus  int
}

// SystemState is what a test reads back from a system.
type SystemState struct {
	PowerState        string // "On" or "Off"
	BootTarget        string
	BootEnabled       string
	BootMode          string
	SecureBoot        bool   // SecureBootEnable
	HTTPBootURI       string // Boot/HttpBootUri ("" when null)
	Bios              map[string]any
	PendingBios       map[string]any
	BiosResetPending  bool
	MediaImage        string // the virtual CD's image URL
	MediaInserted     bool
	USBImage          string // the virtual USB stick's image URL
	USBInserted       bool
	LastPowerError    string
	PowerActionsQueue int
}

// mediaState is what one virtual media slot holds.
type mediaState struct {
	image    string
	inserted bool
}

type session struct {
	id, token, user string
	lastUsed        time.Time
}

type system struct {
	id, managerID string
	machine       Machine
	cpus, memGiB  int
	macs          []string
	noSecureBoot  bool
	// sshConsolePort is the SSH serial console's port (0: none); guarded
	// by BMC.mu.
	sshConsolePort int

	// opMu serialises the machine's operations; it is never held with
	// BMC.mu the other way round (opMu first, then BMC.mu).
	opMu sync.Mutex

	// Guarded by BMC.mu.
	bootTarget, bootEnabled, bootMode string
	// httpBootURI is the Boot object's HttpBootUri ("" shown as null).
	httpBootURI string
	// secureBoot is the SecureBoot resource's SecureBootEnable;
	// secureBootCurrent whether the running boot has it (the last start
	// was in UEFI mode with it on).
	secureBoot, secureBootCurrent bool
	biosDefaults, bios, pending   map[string]any
	biosResetPending              bool
	biosAppliedAt                 time.Time
	media                         map[Slot]mediaState
	lastPowerErr                  string
	queued                        int
	fw, fwPending                 map[string]string
	drives                        []drive
	volumes                       []*volume
	volSeq                        int
}

// BMC is one virtual Redfish BMC. It is an http.Handler.
type BMC struct {
	cfg    Config
	log    *slog.Logger
	uuid   string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	systems     []*system
	sessions    map[string]*session // by token
	faults      Faults
	awayUntil   time.Time
	requests    int
	requestLog  []string
	mgrResets   int
	sessionsMax int
	tasks       []*task
	taskSeq     int
}

// New returns a BMC for cfg.
func New(cfg Config) (*BMC, error) {
	if cfg.Username == "" || cfg.Password == "" {
		return nil, errors.New("vbmc: a BMC needs a Username and a Password")
	}
	if len(cfg.Systems) == 0 {
		return nil, errors.New("vbmc: a BMC needs at least one system")
	}
	if cfg.SessionLimit <= 0 {
		cfg.SessionLimit = 4
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 30 * time.Minute
	}
	if cfg.Name == "" {
		cfg.Name = "bmedge virtual BMC"
	}
	if cfg.UpdateDelay <= 0 {
		cfg.UpdateDelay = 200 * time.Millisecond
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &BMC{cfg: cfg, log: log, uuid: newUUID(), sessions: map[string]*session{}}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	seen := map[string]bool{}
	for i, sc := range cfg.Systems {
		if sc.Machine == nil {
			return nil, fmt.Errorf("vbmc: system %d has no Machine", i)
		}
		id := sc.ID
		if id == "" {
			id = "1"
			if len(cfg.Systems) > 1 {
				id = fmt.Sprintf("system-%d", i+1)
			}
		}
		if strings.ContainsAny(id, "/?#% ") || seen[id] {
			return nil, fmt.Errorf("vbmc: system ID %q is empty, repeated or not usable in a URL", id)
		}
		seen[id] = true
		mode := sc.BootMode
		if mode == "" {
			mode = ModeUEFI
		}
		if mode != ModeUEFI && mode != ModeLegacy {
			return nil, fmt.Errorf("vbmc: system %s: boot mode %q is neither UEFI nor Legacy", id, mode)
		}
		defaults := sc.BiosAttributes
		if defaults == nil {
			defaults = DefaultBiosAttributes()
		}
		s := &system{id: id, machine: sc.Machine, cpus: sc.CPUs, memGiB: sc.MemoryGiB, media: map[Slot]mediaState{},
			bootTarget: BootNone, bootEnabled: OverrideDisabled, bootMode: mode,
			biosDefaults: copyMap(defaults), bios: copyMap(defaults), pending: map[string]any{}}
		if s.cpus == 0 {
			s.cpus = 2
		}
		if s.memGiB == 0 {
			s.memGiB = 4
		}
		s.macs, s.noSecureBoot = append([]string(nil), sc.MACs...), sc.NoSecureBoot
		s.fw, s.fwPending = DefaultFirmware(), map[string]string{}
		for k, v := range sc.Firmware {
			if _, ok := s.fw[k]; !ok || v == "" {
				return nil, fmt.Errorf("vbmc: system %s: firmware component %q is not one of bios, bmc, nic (or has no version)", id, k)
			}
			s.fw[k] = v
		}
		nd, db := sc.DriveCount, sc.DriveBytes
		if nd <= 0 {
			nd = 4
		}
		if db <= 0 {
			db = 100 << 30
		}
		for i := 0; i < nd; i++ {
			s.drives = append(s.drives, drive{id: fmt.Sprintf("Disk.Bay.%d", i), bytes: db})
		}
		// A single system's manager has the name most BMCs use; with
		// several, each system gets its own, as sushy-tools does.
		s.managerID = "BMC"
		if len(cfg.Systems) > 1 {
			s.managerID = "BMC-" + id
		}
		b.systems = append(b.systems, s)
	}
	return b, nil
}

// Close stops power actions still waiting for their delay. The machines
// belong to the caller, who stops them (QEMUMachine.Close).
func (b *BMC) Close() {
	b.cancel()
	b.wg.Wait()
}

// SetFaults replaces the injected faults.
func (b *BMC) SetFaults(f Faults) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.faults = f
}

// DropSessions ends every session, as a BMC that rebooted or timed them
// out would: their tokens get 401 from now on.
func (b *BMC) DropSessions() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sessions = map[string]*session{}
}

// Sessions returns how many sessions are open.
func (b *BMC) Sessions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
	return len(b.sessions)
}

// MaxSessions returns the most sessions that were open at once.
func (b *BMC) MaxSessions() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sessionsMax
}

// Requests returns how many requests the BMC received.
func (b *BMC) Requests() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.requests
}

// RequestLog returns the first 10,000 requests as "METHOD path status".
func (b *BMC) RequestLog() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requestLog...)
}

// ManagerResets returns how many times a manager was reset.
func (b *BMC) ManagerResets() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mgrResets
}

// SystemIDs lists the systems' IDs.
func (b *BMC) SystemIDs() []string {
	var out []string
	for _, s := range b.systems {
		out = append(out, s.id)
	}
	return out
}

// State returns a system's state as the BMC sees it.
func (b *BMC) State(systemID string) (SystemState, error) {
	s := b.system(systemID)
	if s == nil {
		return SystemState{}, fmt.Errorf("vbmc: no system %q (systems: %s)", systemID, strings.Join(b.SystemIDs(), ", "))
	}
	power := powerString(s.machine.PoweredOn())
	b.mu.Lock()
	defer b.mu.Unlock()
	return SystemState{PowerState: power, BootTarget: s.bootTarget, BootEnabled: s.bootEnabled, BootMode: s.bootMode,
		SecureBoot: s.secureBoot, HTTPBootURI: s.httpBootURI, Bios: copyMap(s.bios), PendingBios: copyMap(s.pending), BiosResetPending: s.biosResetPending,
		MediaImage: s.media[SlotCD].image, MediaInserted: s.media[SlotCD].inserted,
		USBImage: s.media[SlotUSB].image, USBInserted: s.media[SlotUSB].inserted, LastPowerError: s.lastPowerErr, PowerActionsQueue: s.queued}, nil
}

func (b *BMC) system(id string) *system {
	for _, s := range b.systems {
		if s.id == id {
			return s
		}
	}
	return nil
}

func (b *BMC) systemByManager(id string) *system {
	for _, s := range b.systems {
		if s.managerID == id {
			return s
		}
	}
	return nil
}

func powerString(on bool) string {
	if on {
		return "On"
	}
	return "Off"
}

func copyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func newUUID() string {
	h := randomHex(16)
	return h[0:8] + "-" + h[8:12] + "-4" + h[13:16] + "-a" + h[17:20] + "-" + h[20:32]
}

const root = "/redfish/v1"

// statusWriter remembers the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// ServeHTTP implements http.Handler.
func (b *BMC) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &statusWriter{ResponseWriter: rw, status: http.StatusOK}
	defer func() {
		b.mu.Lock()
		if len(b.requestLog) < 10000 {
			b.requestLog = append(b.requestLog, fmt.Sprintf("%s %s %d", r.Method, r.URL.Path, w.status))
		}
		b.mu.Unlock()
	}()
	w.Header().Set("OData-Version", "4.0")

	b.mu.Lock()
	b.requests++
	f := b.faults
	fail := 0
	if f.FailStatus != 0 && f.FailCount != 0 {
		fail = f.FailStatus
		if b.faults.FailCount > 0 {
			b.faults.FailCount--
		}
	}
	away := time.Until(b.awayUntil)
	b.mu.Unlock()

	if f.Latency > 0 {
		select {
		case <-time.After(f.Latency):
		case <-r.Context().Done():
			return
		}
	}
	if away > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int(away.Seconds())+1))
		writeError(w, http.StatusServiceUnavailable, "ServiceTemporarilyUnavailable",
			"The BMC is restarting after a manager reset.", "Wait for the BMC to come back and retry.")
		return
	}
	if fail != 0 {
		writeError(w, fail, "InternalError", fmt.Sprintf("Injected fault: HTTP %d.", fail),
			"Resubmit the request. If the problem persists, consider resetting the service.")
		return
	}

	p := strings.TrimSuffix(r.URL.Path, "/")
	if p == "/redfish" {
		if r.Method != http.MethodGet {
			methodNotAllowed(w, r)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"v1": root + "/"})
		return
	}
	if p != root && !strings.HasPrefix(p, root+"/") {
		notFound(w, r)
		return
	}
	segs := []string{}
	if rest := strings.TrimPrefix(p, root); rest != "" {
		segs = strings.Split(strings.TrimPrefix(rest, "/"), "/")
	}
	// The service root, and the session collection's POST (a login), are
	// the only things served without credentials.
	public := len(segs) == 0 && r.Method == http.MethodGet ||
		len(segs) == 2 && segs[0] == "SessionService" && segs[1] == "Sessions" && r.Method == http.MethodPost
	if !public {
		if ok := b.authenticate(w, r); !ok {
			return
		}
	}
	b.route(w, r, segs)
}

// authenticate checks X-Auth-Token or Basic credentials, answering 401 itself.
func (b *BMC) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		b.mu.Lock()
		b.expireLocked()
		s := b.sessions[tok]
		if s != nil {
			s.lastUsed = time.Now()
		}
		b.mu.Unlock()
		if s != nil {
			return true
		}
		writeError(w, http.StatusUnauthorized, "NoValidSession",
			"There is no valid session established with the implementation.", "Establish a session before attempting any operations.")
		return false
	}
	if u, p, ok := r.BasicAuth(); ok {
		if b.credentialsOK(u, p) {
			return true
		}
		w.Header().Set("WWW-Authenticate", `Basic realm="vBMC"`)
		writeError(w, http.StatusUnauthorized, "ResourceAtUriUnauthorized",
			fmt.Sprintf("While accessing the resource at %s, the service received an authorization error: invalid user name or password.", r.URL.Path),
			"Ensure that the appropriate access is provided for the service in order for it to access the URI.")
		return false
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="vBMC"`)
	writeError(w, http.StatusUnauthorized, "NoValidSession",
		"There is no valid session established with the implementation.", "Establish a session or use Basic authentication.")
	return false
}

func (b *BMC) credentialsOK(u, p string) bool {
	uok := subtle.ConstantTimeCompare([]byte(u), []byte(b.cfg.Username)) == 1
	pok := subtle.ConstantTimeCompare([]byte(p), []byte(b.cfg.Password)) == 1
	return uok && pok
}

func (b *BMC) expireLocked() {
	for tok, s := range b.sessions {
		if time.Since(s.lastUsed) > b.cfg.SessionTimeout {
			delete(b.sessions, tok)
		}
	}
}

func (b *BMC) route(w http.ResponseWriter, r *http.Request, segs []string) {
	n := len(segs)
	at := func(i int, s string) bool { return n > i && segs[i] == s }
	switch {
	case n == 0:
		b.get(w, r, b.serviceRoot)
	case at(0, "Systems") && n == 1:
		b.get(w, r, b.systemCollection)
	case at(0, "Systems") && n >= 2:
		s := b.system(segs[1])
		if s == nil {
			notFound(w, r)
			return
		}
		switch {
		case n == 2:
			switch r.Method {
			case http.MethodGet:
				writeJSON(w, http.StatusOK, b.systemResource(s))
			case http.MethodPatch:
				b.patchSystem(w, r, s)
			default:
				methodNotAllowed(w, r)
			}
		case n == 4 && at(2, "Actions") && at(3, "ComputerSystem.Reset"):
			b.post(w, r, func() { b.resetSystem(w, r, s) })
		case n == 3 && at(2, "Bios"):
			b.get(w, r, func() any { return b.biosResource(s) })
		case n == 4 && at(2, "Bios") && at(3, "Settings"):
			switch r.Method {
			case http.MethodGet:
				writeJSON(w, http.StatusOK, b.biosSettingsResource(s))
			case http.MethodPatch:
				b.patchBiosSettings(w, r, s)
			default:
				methodNotAllowed(w, r)
			}
		case n == 5 && at(2, "Bios") && at(3, "Actions") && at(4, "Bios.ResetBios"):
			b.post(w, r, func() { b.resetBios(w, r, s) })
		case n >= 3 && at(2, "Storage"):
			b.routeStorage(w, r, s, segs[3:])
		case n >= 3 && (at(2, "Processors") || at(2, "EthernetInterfaces") || at(2, "SecureBoot")):
			b.routeInventory(w, r, s, segs[2:])
		default:
			notFound(w, r)
		}
	case at(0, "Managers") && n == 1:
		b.get(w, r, b.managerCollection)
	case at(0, "Managers") && n >= 2:
		s := b.systemByManager(segs[1])
		if s == nil {
			notFound(w, r)
			return
		}
		switch {
		case n == 2:
			b.get(w, r, func() any { return b.managerResource(s) })
		case n == 4 && at(2, "Actions") && at(3, "Manager.Reset"):
			b.post(w, r, func() { b.resetManager(w, r, s) })
		case n == 3 && at(2, "VirtualMedia"):
			b.get(w, r, func() any { return b.virtualMediaCollection(s) })
		case n == 4 && at(2, "VirtualMedia") && knownSlot(Slot(segs[3])) == nil:
			b.get(w, r, func() any { return b.virtualMediaResource(s, Slot(segs[3])) })
		case n == 6 && at(2, "VirtualMedia") && knownSlot(Slot(segs[3])) == nil && at(4, "Actions") && at(5, "VirtualMedia.InsertMedia"):
			b.post(w, r, func() { b.insertMedia(w, r, s, Slot(segs[3])) })
		case n == 6 && at(2, "VirtualMedia") && knownSlot(Slot(segs[3])) == nil && at(4, "Actions") && at(5, "VirtualMedia.EjectMedia"):
			b.post(w, r, func() { b.ejectMedia(w, r, s, Slot(segs[3])) })
		default:
			notFound(w, r)
		}
	case at(0, "UpdateService") && n == 1:
		b.get(w, r, b.updateService)
	case at(0, "UpdateService") && n == 2 && at(1, "FirmwareInventory"):
		b.get(w, r, b.firmwareInventory)
	case at(0, "UpdateService") && n == 3 && at(1, "FirmwareInventory"):
		fs, comp := b.fwByID(segs[2])
		if fs == nil {
			notFound(w, r)
			return
		}
		b.get(w, r, func() any { return b.firmwareItem(fs, comp) })
	case at(0, "UpdateService") && n == 3 && at(1, "Actions") && at(2, "UpdateService.SimpleUpdate"):
		b.post(w, r, func() { b.simpleUpdate(w, r) })
	case at(0, "UpdateService") && n == 2 && at(1, "upload"):
		b.post(w, r, func() { b.multipartUpdate(w, r) })
	case at(0, "TaskService") && n == 1:
		b.get(w, r, b.taskService)
	case at(0, "TaskService") && at(1, "Tasks") && n == 2:
		b.get(w, r, b.taskCollection)
	case at(0, "TaskService") && at(1, "Tasks") && n == 3:
		t := b.findTask(segs[2])
		if t == nil {
			notFound(w, r)
			return
		}
		// While the task runs its resource answers 202, as a task
		// monitor does (clients such as sushy poll until it stops).
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, r)
			return
		}
		status := http.StatusOK
		if t.running(b) {
			status = http.StatusAccepted
		}
		writeJSON(w, status, b.taskResource(t))
	case at(0, "Registries") && n == 1:
		b.get(w, r, b.registryCollection)
	case at(0, "Registries") && n == 2 && segs[1] == biosRegistryID:
		b.get(w, r, b.registryFile)
	case at(0, "Registries") && n == 3 && segs[1] == biosRegistryID && segs[2] == "BiosAttributeRegistry":
		b.get(w, r, b.registryResource)
	case at(0, "SessionService") && n == 1:
		b.get(w, r, b.sessionService)
	case at(0, "SessionService") && at(1, "Sessions") && n == 2:
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, b.sessionCollection())
		case http.MethodPost:
			b.createSession(w, r)
		default:
			methodNotAllowed(w, r)
		}
	case at(0, "SessionService") && at(1, "Sessions") && n == 3:
		switch r.Method {
		case http.MethodGet:
			b.getSession(w, r, segs[2])
		case http.MethodDelete:
			b.deleteSession(w, r, segs[2])
		default:
			methodNotAllowed(w, r)
		}
	default:
		notFound(w, r)
	}
}

func (b *BMC) get(w http.ResponseWriter, r *http.Request, body func() any) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, r)
		return
	}
	writeJSON(w, http.StatusOK, body())
}

func (b *BMC) post(w http.ResponseWriter, r *http.Request, h func()) {
	if r.Method != http.MethodPost {
		methodNotAllowed(w, r)
		return
	}
	h()
}

// readBody decodes a JSON object body, answering 400 itself. An empty
// body is an empty object: some clients POST actions without one.
func readBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	data, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON", "The request body could not be read.", "Resubmit the request.")
		return nil, false
	}
	body := map[string]any{}
	if len(strings.TrimSpace(string(data))) == 0 {
		return body, true
	}
	if err := json.Unmarshal(data, &body); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedJSON",
			"The request body submitted was malformed JSON and could not be parsed by the receiving service.",
			"Ensure that the request body is valid JSON and resubmit the request.")
		return nil, false
	}
	return body, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.MarshalIndent(v, "", " ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// writeError answers in Redfish's error shape with a Base registry message.
func writeError(w http.ResponseWriter, status int, msgID, message, resolution string) {
	id := "Base.1.8." + msgID
	severity := "Warning"
	if status >= 500 {
		severity = "Critical"
	}
	code := id
	if status >= 500 && msgID != "SessionLimitExceeded" && msgID != "ServiceTemporarilyUnavailable" {
		code = "Base.1.8.GeneralError"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"code":    code,
		"message": message,
		"@Message.ExtendedInfo": []any{map[string]any{
			"@odata.type": "#Message.v1_1_1.Message",
			"MessageId":   id,
			"Message":     message,
			"Severity":    severity,
			"Resolution":  resolution,
		}},
	}})
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "ResourceMissingAtURI",
		fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path),
		"Place a valid resource at the URI or correct the URI and resubmit the request.")
}

func methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusMethodNotAllowed, "OperationNotAllowed",
		fmt.Sprintf("The %s operation is not allowed on %s.", r.Method, r.URL.Path), "Use an operation the resource allows.")
}

func badValue(w http.ResponseWriter, prop string, value any, allowed []string) {
	writeError(w, http.StatusBadRequest, "PropertyValueNotInList",
		fmt.Sprintf("The value %v for the property %s is not in the list of acceptable values (%s).", value, prop, strings.Join(allowed, ", ")),
		"Choose a value from the enumeration list that the implementation can support and resubmit the request if the operation failed.")
}

func odataID(p string) map[string]any { return map[string]any{"@odata.id": p} }

func (b *BMC) serviceRoot() any {
	return map[string]any{
		"@odata.type":    "#ServiceRoot.v1_5_0.ServiceRoot",
		"@odata.id":      root,
		"Id":             "RootService",
		"Name":           b.cfg.Name,
		"RedfishVersion": "1.11.0",
		"UUID":           b.uuid,
		"Vendor":         "bmedge",
		"Product":        "vBMC (tests and labs only)",
		"Systems":        odataID(root + "/Systems"),
		"Managers":       odataID(root + "/Managers"),
		"SessionService": odataID(root + "/SessionService"),
		"UpdateService":  odataID(root + "/UpdateService"),
		"TaskService":    odataID(root + "/TaskService"),
		"Registries":     odataID(root + "/Registries"),
		"Links":          map[string]any{"Sessions": odataID(root + "/SessionService/Sessions")},
	}
}

func collection(typ, name, path string, members []string) map[string]any {
	ms := []any{}
	for _, m := range members {
		ms = append(ms, odataID(m))
	}
	return map[string]any{
		"@odata.type":         typ,
		"@odata.id":           path,
		"Name":                name,
		"Members":             ms,
		"Members@odata.count": len(ms),
	}
}

func (b *BMC) systemCollection() any {
	var ms []string
	for _, s := range b.systems {
		ms = append(ms, root+"/Systems/"+s.id)
	}
	return collection("#ComputerSystemCollection.ComputerSystemCollection", "Computer System Collection", root+"/Systems", ms)
}

func (b *BMC) managerCollection() any {
	var ms []string
	for _, s := range b.systems {
		ms = append(ms, root+"/Managers/"+s.managerID)
	}
	return collection("#ManagerCollection.ManagerCollection", "Manager Collection", root+"/Managers", ms)
}

func sysPath(s *system) string { return root + "/Systems/" + s.id }
func mgrPath(s *system) string { return root + "/Managers/" + s.managerID }

var (
	bootTargets  = []string{BootNone, BootPxe, BootHdd, BootCd, BootBiosSetup, BootUefiHttp}
	bootEnabled  = []string{OverrideDisabled, OverrideOnce, OverrideContinuous}
	bootModes    = []string{ModeUEFI, ModeLegacy}
	managerReset = []string{"GracefulRestart", "ForceRestart"}
)

func resetTypeStrings() []string {
	var out []string
	for _, t := range ResetTypes {
		out = append(out, string(t))
	}
	return out
}

func (b *BMC) systemResource(s *system) any {
	power := powerString(s.machine.PoweredOn())
	b.mu.Lock()
	defer b.mu.Unlock()
	health := "OK"
	if s.lastPowerErr != "" {
		health = "Warning"
	}
	doc := map[string]any{
		"@odata.type":  "#ComputerSystem.v1_13_0.ComputerSystem",
		"@odata.id":    sysPath(s),
		"Id":           s.id,
		"Name":         "System " + s.id,
		"SystemType":   "Physical",
		"Manufacturer": "bmedge",
		"Model":        "vBMC virtual system",
		"SerialNumber": "VBMC-" + s.id,
		"UUID":         b.uuid,
		"PowerState":   power,
		"Status":       map[string]any{"State": "Enabled", "Health": health},
		"Boot": map[string]any{
			"BootSourceOverrideEnabled":                         s.bootEnabled,
			"BootSourceOverrideEnabled@Redfish.AllowableValues": bootEnabled,
			"BootSourceOverrideTarget":                          s.bootTarget,
			"BootSourceOverrideTarget@Redfish.AllowableValues":  bootTargets,
			"BootSourceOverrideMode":                            s.bootMode,
			"BootSourceOverrideMode@Redfish.AllowableValues":    bootModes,
			"HttpBootUri": nullable(s.httpBootURI),
		},
		"ProcessorSummary": map[string]any{"Count": 1, "LogicalProcessorCount": s.cpus, "Model": processorModel, "Status": map[string]any{"State": "Enabled", "Health": "OK"}},
		"MemorySummary":    map[string]any{"TotalSystemMemoryGiB": s.memGiB, "Status": map[string]any{"State": "Enabled", "Health": "OK"}},
		"Bios":             odataID(sysPath(s) + "/Bios"),
		"BiosVersion":      s.fw[ComponentBIOS],
		"Storage":          odataID(sysPath(s) + "/Storage"),
		"Processors":       odataID(sysPath(s) + "/Processors"),
		"Links":            map[string]any{"ManagedBy": []any{odataID(mgrPath(s))}},
		"Actions": map[string]any{
			"#ComputerSystem.Reset": map[string]any{
				"target":                            sysPath(s) + "/Actions/ComputerSystem.Reset",
				"ResetType@Redfish.AllowableValues": resetTypeStrings(),
			},
		},
	}
	if !s.noSecureBoot {
		doc["SecureBoot"] = odataID(sysPath(s) + "/SecureBoot")
	}
	if len(s.macs) > 0 {
		doc["EthernetInterfaces"] = odataID(sysPath(s) + "/EthernetInterfaces")
	}
	return doc
}

// patchSystem accepts the Boot override properties and nothing else: a
// client that writes anything more would be relying on this BMC only.
func (b *BMC) patchSystem(w http.ResponseWriter, r *http.Request, s *system) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	for k := range body {
		if k != "Boot" && !strings.HasPrefix(k, "@odata.") {
			writeError(w, http.StatusBadRequest, "PropertyNotWritable",
				fmt.Sprintf("The property %s is a read only property and cannot be assigned a value.", k), "Remove the property from the request body and resubmit the request.")
			return
		}
	}
	boot, isObj := body["Boot"].(map[string]any)
	if !isObj {
		writeError(w, http.StatusBadRequest, "PropertyValueTypeError",
			"The value for the property Boot is of a different type than the property can accept.", "Send Boot as an object.")
		return
	}
	set := map[string]string{}
	allowed := map[string][]string{"BootSourceOverrideTarget": bootTargets, "BootSourceOverrideEnabled": bootEnabled, "BootSourceOverrideMode": bootModes}
	httpURI, setHTTP := "", false
	for k, v := range boot {
		if k == "HttpBootUri" {
			str, isStr := v.(string)
			if v != nil && !isStr {
				writeError(w, http.StatusBadRequest, "PropertyValueTypeError",
					fmt.Sprintf("The value %v for the property Boot/HttpBootUri is of a different type than the property can accept.", v), "Send a URI string, or null to clear it.")
				return
			}
			if str != "" {
				if err := checkMediaURL(str); err != nil || len(str) > 4096 {
					writeError(w, http.StatusBadRequest, "PropertyValueFormatError",
						"The value for the property Boot/HttpBootUri is not an http or https URI of at most 4096 bytes.", "Give the URI of the image to boot by UEFI HTTP boot.")
					return
				}
			}
			httpURI, setHTTP = str, true
			continue
		}
		vals, known := allowed[k]
		if !known {
			writeError(w, http.StatusBadRequest, "PropertyNotWritable",
				fmt.Sprintf("The property Boot/%s is a read only property and cannot be assigned a value.", k), "Remove the property from the request body and resubmit the request.")
			return
		}
		str, _ := v.(string)
		if !contains(vals, str) {
			badValue(w, "Boot/"+k, v, vals)
			return
		}
		set[k] = str
	}
	b.mu.Lock()
	if v, ok := set["BootSourceOverrideTarget"]; ok {
		s.bootTarget = v
	}
	if v, ok := set["BootSourceOverrideEnabled"]; ok {
		s.bootEnabled = v
	}
	if v, ok := set["BootSourceOverrideMode"]; ok {
		s.bootMode = v
	}
	if setHTTP {
		s.httpBootURI = httpURI
	}
	b.log.Info("vbmc boot override", "system", s.id, "target", s.bootTarget, "enabled", s.bootEnabled, "mode", s.bootMode, "http_boot_uri", s.httpBootURI != "")
	b.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (b *BMC) resetSystem(w http.ResponseWriter, r *http.Request, s *system) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	raw, present := body["ResetType"]
	if !present {
		writeError(w, http.StatusBadRequest, "ActionParameterMissing",
			"The action ComputerSystem.Reset requires the parameter ResetType to be present in the request body.", "Supply the action with the required parameter in the request body when the request is resubmitted.")
		return
	}
	str, _ := raw.(string)
	if !contains(resetTypeStrings(), str) {
		writeError(w, http.StatusBadRequest, "ActionParameterValueNotInList",
			fmt.Sprintf("The value %v for the parameter ResetType in the action ComputerSystem.Reset is not in the list of acceptable values (%s).", raw, strings.Join(resetTypeStrings(), ", ")),
			"Choose a value from the enumeration list that the implementation can support and resubmit the request if the operation failed.")
		return
	}
	rt := ResetType(str)
	b.mu.Lock()
	delay := b.faults.PowerDelay
	if delay > 0 {
		s.queued++
	}
	b.mu.Unlock()
	b.log.Info("vbmc reset", "system", s.id, "type", rt, "delay", delay)
	if delay <= 0 {
		if err := b.applyReset(r.Context(), s, rt); err != nil {
			writeError(w, http.StatusInternalServerError, "InternalError",
				fmt.Sprintf("The machine failed to %s: %v.", rt, err), "Check the machine and retry.")
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// A slow BMC accepts the reset and carries it out later; until then
	// PowerState shows the old state.
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		defer func() {
			b.mu.Lock()
			s.queued--
			b.mu.Unlock()
		}()
		select {
		case <-time.After(delay):
		case <-b.ctx.Done():
			return
		}
		if err := b.applyReset(b.ctx, s, rt); err != nil {
			b.log.Warn("vbmc delayed reset failed", "system", s.id, "type", rt, "err", err)
		}
	}()
	w.WriteHeader(http.StatusNoContent)
}

// applyReset carries out a reset on the machine. A reset that starts the
// machine boots the override target (consuming a Once override) and
// applies pending BIOS settings, as firmware does at POST.
func (b *BMC) applyReset(ctx context.Context, s *system, rt ResetType) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	starts := rt == ResetForceRestart || rt == ResetGracefulRestart || rt == ResetPowerCycle ||
		rt == ResetOn && !s.machine.PoweredOn()
	if starts {
		b.mu.Lock()
		boot := Boot{Device: BootHdd, Mode: s.bootMode, SecureBoot: s.secureBoot && s.bootMode == ModeUEFI && !s.noSecureBoot}
		if s.bootEnabled != OverrideDisabled && s.bootTarget != BootNone {
			boot.Device = s.bootTarget
		}
		if boot.Device == BootUefiHttp {
			boot.HTTPBootURI = s.httpBootURI
		}
		b.mu.Unlock()
		if boot.Device == BootUefiHttp && boot.Mode != ModeUEFI {
			return b.powerFailed(s, errors.New("UEFI HTTP boot (UefiHttp) needs the boot mode UEFI"))
		}
		if err := s.machine.SetBoot(ctx, boot); err != nil {
			return b.powerFailed(s, err)
		}
	}
	if err := s.machine.Power(ctx, rt); err != nil {
		return b.powerFailed(s, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s.lastPowerErr = ""
	if starts {
		s.secureBootCurrent = s.secureBoot && s.bootMode == ModeUEFI && !s.noSecureBoot
		if s.bootEnabled == OverrideOnce {
			s.bootEnabled = OverrideDisabled
		}
		if s.biosResetPending {
			s.bios = copyMap(s.biosDefaults)
			s.biosResetPending = false
			s.biosAppliedAt = time.Now()
		}
		if len(s.pending) > 0 {
			for k, v := range s.pending {
				s.bios[k] = v
			}
			s.pending = map[string]any{}
			s.biosAppliedAt = time.Now()
		}
		activateFirmware(s, ComponentBIOS, ComponentNIC)
	}
	return nil
}

func (b *BMC) powerFailed(s *system, err error) error {
	b.mu.Lock()
	s.lastPowerErr = err.Error()
	b.mu.Unlock()
	return err
}

func (b *BMC) biosResource(s *system) any {
	b.mu.Lock()
	defer b.mu.Unlock()
	settings := map[string]any{
		"@odata.type":         "#Settings.v1_3_0.Settings",
		"SettingsObject":      odataID(sysPath(s) + "/Bios/Settings"),
		"SupportedApplyTimes": []string{"OnReset"},
	}
	if !s.biosAppliedAt.IsZero() {
		settings["Time"] = s.biosAppliedAt.UTC().Format(time.RFC3339)
		settings["Messages"] = []any{map[string]any{"MessageId": "Base.1.8.Success", "Message": "Successfully Completed Request", "Severity": "OK"}}
	}
	return map[string]any{
		"@odata.type":                "#Bios.v1_1_0.Bios",
		"@odata.id":                  sysPath(s) + "/Bios",
		"Id":                         "BIOS",
		"Name":                       "BIOS Configuration Current Settings",
		"AttributeRegistry":          "BiosAttributeRegistry.v1_0_0",
		"Attributes":                 copyMap(s.bios),
		"ResetBiosToDefaultsPending": s.biosResetPending,
		"@Redfish.Settings":          settings,
		"Actions": map[string]any{
			"#Bios.ResetBios": map[string]any{"target": sysPath(s) + "/Bios/Actions/Bios.ResetBios"},
		},
	}
}

func (b *BMC) biosSettingsResource(s *system) any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return map[string]any{
		"@odata.type": "#Bios.v1_1_0.Bios",
		"@odata.id":   sysPath(s) + "/Bios/Settings",
		"Id":          "Settings",
		"Name":        "BIOS Configuration Pending Settings",
		"Attributes":  copyMap(s.pending),
	}
}

// patchBiosSettings stages attributes for the next start. Unknown names
// and values of another JSON type are refused, as real BMCs check them
// against their attribute registry.
func (b *BMC) patchBiosSettings(w http.ResponseWriter, r *http.Request, s *system) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	for k, v := range body {
		switch {
		case k == "Attributes", strings.HasPrefix(k, "@odata."):
		case k == "@Redfish.SettingsApplyTime":
			at, _ := v.(map[string]any)
			if t, _ := at["ApplyTime"].(string); t != "OnReset" {
				badValue(w, "@Redfish.SettingsApplyTime/ApplyTime", at["ApplyTime"], []string{"OnReset"})
				return
			}
		default:
			writeError(w, http.StatusBadRequest, "PropertyUnknown",
				fmt.Sprintf("The property %s is not in the list of valid properties for the resource.", k), "Remove the unknown property from the request body and resubmit the request if the operation failed.")
			return
		}
	}
	attrs, isObj := body["Attributes"].(map[string]any)
	if !isObj {
		writeError(w, http.StatusBadRequest, "PropertyMissing",
			"The property Attributes is a required property and must be included in the request.", "Send the attributes to change in an Attributes object.")
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var unknown []string
	for k, v := range attrs {
		cur, known := s.biosDefaults[k]
		if !known {
			unknown = append(unknown, k)
			continue
		}
		if fmt.Sprintf("%T", cur) != fmt.Sprintf("%T", v) {
			writeError(w, http.StatusBadRequest, "PropertyValueTypeError",
				fmt.Sprintf("The value %v for the property Attributes/%s is of a different type than the property can accept.", v, k),
				"Correct the value for the property in the request body and resubmit the request if the operation failed.")
			return
		}
		if ra, ok := registryAttr(s, k); ok {
			if why := checkAttr(k, ra, v); why != "" {
				writeError(w, http.StatusBadRequest, "PropertyValueIncorrect",
					fmt.Sprintf("The value %v for the property Attributes/%s is not acceptable: %s (see %s).", v, k, why, root+"/Registries/"+biosRegistryID),
					"Correct the value for the property in the request body and resubmit the request if the operation failed.")
				return
			}
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		writeError(w, http.StatusBadRequest, "PropertyUnknown",
			fmt.Sprintf("The properties %s are not in the list of valid BIOS attributes for the resource.", strings.Join(unknown, ", ")),
			"Remove the unknown property from the request body and resubmit the request if the operation failed.")
		return
	}
	for k, v := range attrs {
		s.pending[k] = v
	}
	b.log.Info("vbmc bios settings pending", "system", s.id, "attributes", len(attrs))
	w.WriteHeader(http.StatusNoContent)
}

func (b *BMC) resetBios(w http.ResponseWriter, r *http.Request, s *system) {
	if _, ok := readBody(w, r); !ok {
		return
	}
	b.mu.Lock()
	s.biosResetPending = true
	s.pending = map[string]any{}
	b.mu.Unlock()
	b.log.Info("vbmc bios reset to defaults pending", "system", s.id)
	w.WriteHeader(http.StatusNoContent)
}

func (b *BMC) managerResource(s *system) any {
	b.mu.Lock()
	port := s.sshConsolePort
	b.mu.Unlock()
	return map[string]any{
		"@odata.type":     "#Manager.v1_10_0.Manager",
		"@odata.id":       mgrPath(s),
		"Id":              s.managerID,
		"Name":            "Manager " + s.managerID,
		"ManagerType":     "BMC",
		"UUID":            b.uuid,
		"Model":           "vBMC",
		"FirmwareVersion": b.firmwareVersion(s, ComponentBMC),
		"Status":          map[string]any{"State": "Enabled", "Health": "OK"},
		"VirtualMedia":    odataID(mgrPath(s) + "/VirtualMedia"),
		"SerialConsole":   sshConsoleResource(port),
		"Links":           map[string]any{"ManagerForServers": []any{odataID(sysPath(s))}},
		"Actions": map[string]any{
			"#Manager.Reset": map[string]any{
				"target":                            mgrPath(s) + "/Actions/Manager.Reset",
				"ResetType@Redfish.AllowableValues": managerReset,
			},
		},
	}
}

// resetManager reboots the BMC: every session ends, and the BMC is away
// for ResetDowntime. The machine keeps running, as a real one does.
func (b *BMC) resetManager(w http.ResponseWriter, r *http.Request, s *system) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	if raw, present := body["ResetType"]; present {
		if str, _ := raw.(string); !contains(managerReset, str) {
			writeError(w, http.StatusBadRequest, "ActionParameterValueNotInList",
				fmt.Sprintf("The value %v for the parameter ResetType in the action Manager.Reset is not in the list of acceptable values (%s).", raw, strings.Join(managerReset, ", ")),
				"Choose a value from the enumeration list that the implementation can support and resubmit the request if the operation failed.")
			return
		}
	}
	b.mu.Lock()
	for _, other := range b.systems {
		if other.managerID == s.managerID {
			activateFirmware(other, ComponentBMC)
		}
	}
	b.mgrResets++
	b.sessions = map[string]*session{}
	b.awayUntil = time.Now().Add(b.cfg.ResetDowntime)
	b.mu.Unlock()
	b.log.Info("vbmc manager reset", "manager", s.managerID, "downtime", b.cfg.ResetDowntime)
	w.WriteHeader(http.StatusNoContent)
}

func (b *BMC) virtualMediaCollection(s *system) any {
	var members []string
	for _, slot := range Slots {
		members = append(members, mgrPath(s)+"/VirtualMedia/"+string(slot))
	}
	return collection("#VirtualMediaCollection.VirtualMediaCollection", "Virtual Media Services", mgrPath(s)+"/VirtualMedia", members)
}

// slotLook is how a slot presents itself.
var slotLook = map[Slot]struct {
	name  string
	types []string
}{
	SlotCD:  {"Virtual CD", []string{"CD", "DVD"}},
	SlotUSB: {"Virtual USB stick", []string{"USBStick"}},
}

func (b *BMC) virtualMediaResource(s *system, slot Slot) any {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := mgrPath(s) + "/VirtualMedia/" + string(slot)
	m := s.media[slot]
	via, name := "NotConnected", ""
	if m.inserted {
		via = "URI"
		name = m.image[strings.LastIndex(m.image, "/")+1:]
	}
	var image any
	if m.image != "" {
		image = m.image
	}
	return map[string]any{
		"@odata.type":    "#VirtualMedia.v1_3_0.VirtualMedia",
		"@odata.id":      p,
		"Id":             string(slot),
		"Name":           slotLook[slot].name,
		"MediaTypes":     slotLook[slot].types,
		"Image":          image,
		"ImageName":      name,
		"Inserted":       m.inserted,
		"WriteProtected": true,
		"ConnectedVia":   via,
		"Actions": map[string]any{
			"#VirtualMedia.InsertMedia": map[string]any{"target": p + "/Actions/VirtualMedia.InsertMedia"},
			"#VirtualMedia.EjectMedia":  map[string]any{"target": p + "/Actions/VirtualMedia.EjectMedia"},
		},
	}
}

// insertMedia attaches an image. As on real BMCs, a slot that holds an
// image must be ejected first.
func (b *BMC) insertMedia(w http.ResponseWriter, r *http.Request, s *system, slot Slot) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	known := map[string]bool{"Image": true, "Inserted": true, "WriteProtected": true, "UserName": true, "Password": true,
		"TransferProtocolType": true, "TransferMethod": true}
	for k := range body {
		if !known[k] {
			writeError(w, http.StatusBadRequest, "ActionParameterUnknown",
				fmt.Sprintf("The action VirtualMedia.InsertMedia was submitted with the invalid parameter %s.", k), "Correct the invalid parameter and resubmit the request if the operation failed.")
			return
		}
	}
	image, _ := body["Image"].(string)
	if image == "" {
		writeError(w, http.StatusBadRequest, "ActionParameterMissing",
			"The action VirtualMedia.InsertMedia requires the parameter Image to be present in the request body.", "Supply the action with the required parameter in the request body when the request is resubmitted.")
		return
	}
	if err := checkMediaURL(image); err != nil {
		writeError(w, http.StatusBadRequest, "ActionParameterValueFormatError",
			fmt.Sprintf("The value %s for the parameter Image in the action VirtualMedia.InsertMedia is of a different format than the parameter can accept: %v.", image, err),
			"Give an http or https URL.")
		return
	}
	inserted := true
	if v, ok := body["Inserted"].(bool); ok {
		inserted = v
	}
	what := strings.ToLower(slotLook[slot].name)
	s.opMu.Lock()
	defer s.opMu.Unlock()
	b.mu.Lock()
	busy := s.media[slot].inserted
	refuse := b.faults.InsertMediaStatus
	b.mu.Unlock()
	if refuse != 0 {
		writeError(w, refuse, "ActionNotSupported",
			fmt.Sprintf("The action VirtualMedia.InsertMedia is not supported by the %s: the virtual media feature is not licensed.", what), "Install a licence for virtual media, or boot the system another way.")
		return
	}
	if busy {
		writeError(w, http.StatusConflict, "ResourceInUse",
			fmt.Sprintf("The change to the requested resource failed because the resource is in use or in transition: the %s holds an image.", what), "Eject the media first, then insert the new image.")
		return
	}
	if inserted {
		if err := s.machine.InsertMedia(r.Context(), slot, image); err != nil {
			writeError(w, http.StatusBadRequest, "ResourceCannotBeCreated",
				fmt.Sprintf("The %s could not attach %s: %v.", what, image, err), "Check that the image URL is reachable from the BMC and resubmit the request.")
			return
		}
	}
	b.mu.Lock()
	s.media[slot] = mediaState{image: image, inserted: inserted}
	b.mu.Unlock()
	b.log.Info("vbmc virtual media inserted", "system", s.id, "slot", slot, "image", image)
	w.WriteHeader(http.StatusNoContent)
}

func (b *BMC) ejectMedia(w http.ResponseWriter, r *http.Request, s *system, slot Slot) {
	if _, ok := readBody(w, r); !ok {
		return
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	b.mu.Lock()
	refuse := b.faults.EjectMediaStatus
	holds := s.media[slot].inserted
	b.mu.Unlock()
	if refuse != 0 && holds {
		writeError(w, refuse, "ResourceInUse",
			fmt.Sprintf("The %s could not eject: the media is in use by the host.", strings.ToLower(slotLook[slot].name)), "Retry the request once the host released it.")
		return
	}
	if err := s.machine.EjectMedia(r.Context(), slot); err != nil {
		writeError(w, http.StatusInternalServerError, "InternalError",
			fmt.Sprintf("The %s could not eject: %v.", strings.ToLower(slotLook[slot].name), err), "Retry the request.")
		return
	}
	b.mu.Lock()
	delete(s.media, slot)
	b.mu.Unlock()
	b.log.Info("vbmc virtual media ejected", "system", s.id, "slot", slot)
	w.WriteHeader(http.StatusNoContent)
}

func (b *BMC) sessionService() any {
	return map[string]any{
		"@odata.type":    "#SessionService.v1_1_8.SessionService",
		"@odata.id":      root + "/SessionService",
		"Id":             "SessionService",
		"Name":           "Session Service",
		"ServiceEnabled": true,
		"SessionTimeout": int(b.cfg.SessionTimeout.Seconds()),
		"Sessions":       odataID(root + "/SessionService/Sessions"),
	}
}

func (b *BMC) sessionCollection() any {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expireLocked()
	var ms []string
	for _, s := range b.sessions {
		ms = append(ms, root+"/SessionService/Sessions/"+s.id)
	}
	sort.Strings(ms)
	return collection("#SessionCollection.SessionCollection", "Session Collection", root+"/SessionService/Sessions", ms)
}

func sessionResource(s *session) any {
	return map[string]any{
		"@odata.type": "#Session.v1_3_0.Session",
		"@odata.id":   root + "/SessionService/Sessions/" + s.id,
		"Id":          s.id,
		"Name":        "User Session",
		"UserName":    s.user,
	}
}

func (b *BMC) createSession(w http.ResponseWriter, r *http.Request) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	user, _ := body["UserName"].(string)
	pass, _ := body["Password"].(string)
	if user == "" || pass == "" {
		writeError(w, http.StatusBadRequest, "PropertyMissing",
			"The properties UserName and Password are required to create a session.", "Include UserName and Password in the request body.")
		return
	}
	if !b.credentialsOK(user, pass) {
		b.log.Info("vbmc login refused", "user", user)
		writeError(w, http.StatusUnauthorized, "NoValidSession",
			"Login failed: invalid user name or password.", "Check the user name and password and resubmit the request.")
		return
	}
	b.mu.Lock()
	b.expireLocked()
	if len(b.sessions) >= b.cfg.SessionLimit {
		n := len(b.sessions)
		b.mu.Unlock()
		writeError(w, http.StatusServiceUnavailable, "SessionLimitExceeded",
			fmt.Sprintf("The session establishment failed due to the number of simultaneous sessions exceeding the limit of the implementation (%d of %d open).", n, b.cfg.SessionLimit),
			"Reduce the number of other sessions before trying to establish the session or increase the limit of simultaneous sessions (if supported).")
		return
	}
	s := &session{id: randomHex(8), token: randomHex(24), user: user, lastUsed: time.Now()}
	b.sessions[s.token] = s
	if len(b.sessions) > b.sessionsMax {
		b.sessionsMax = len(b.sessions)
	}
	b.mu.Unlock()
	w.Header().Set("X-Auth-Token", s.token)
	w.Header().Set("Location", root+"/SessionService/Sessions/"+s.id)
	writeJSON(w, http.StatusCreated, sessionResource(s))
}

func (b *BMC) findSession(id string) *session {
	b.expireLocked()
	for _, s := range b.sessions {
		if s.id == id {
			return s
		}
	}
	return nil
}

func (b *BMC) getSession(w http.ResponseWriter, r *http.Request, id string) {
	b.mu.Lock()
	s := b.findSession(id)
	b.mu.Unlock()
	if s == nil {
		notFound(w, r)
		return
	}
	writeJSON(w, http.StatusOK, sessionResource(s))
}

func (b *BMC) deleteSession(w http.ResponseWriter, r *http.Request, id string) {
	b.mu.Lock()
	s := b.findSession(id)
	if s != nil {
		delete(b.sessions, s.token)
	}
	b.mu.Unlock()
	if s == nil {
		notFound(w, r)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// nullable is v, or JSON null when v is empty.
func nullable(v string) any {
	if v == "" {
		return nil
	}
	return v
}
