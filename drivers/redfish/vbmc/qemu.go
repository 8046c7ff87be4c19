package vbmc

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// QEMUConfig says how a QEMUMachine runs its VM. Like drivers/qemuvm,
// the VM uses user-mode networking and opens no listener of its own but
// the QMP unix socket in Dir.
type QEMUConfig struct {
	// QEMU is the emulator (default qemu-system-x86_64).
	QEMU string
	// Dir holds the QMP socket and the virtual media cache (required; a
	// short path: unix socket paths are limited to 108 bytes).
	Dir string
	// Disk is a raw disk image; DiskSerial its serial number. A machine
	// without a disk boots from the network or the CD only.
	Disk, DiskSerial string
	// MemoryMB and CPUs size the VM (default 1024 and 1).
	MemoryMB, CPUs int
	// Console receives the serial console (default Dir/console.log). The
	// serial port is also a unix socket, Dir/serial.sock (QEMU's chardev
	// socket server with Console as its log file): the BMC's SSH serial
	// console connects there. Output is logged whether or not anyone is
	// connected.
	Console string
	// OVMF is the UEFI firmware used when the boot mode is UEFI (default
	// /usr/share/ovmf/OVMF.fd, Debian's ovmf); Legacy boots SeaBIOS.
	OVMF string
	// OVMFSecureCode and OVMFSecureVars are the UEFI firmware with Secure
	// Boot and its variables' template with Microsoft's keys enrolled,
	// used when the boot mode is UEFI and the SecureBoot resource's
	// SecureBootEnable is on (default Debian's ovmf:
	// /usr/share/OVMF/OVMF_CODE_4M.ms.fd and OVMF_VARS_4M.ms.fd). The
	// machine keeps its own copy of the variables in Dir, made at its
	// first Secure Boot start, as a server keeps its NVRAM.
	OVMFSecureCode, OVMFSecureVars string
	// Netdev is the -netdev value, with id=n0 (default "user,id=n0"); for
	// PXE, e.g. "user,id=n0,bootfile=http://10.0.2.2:8080/boot.ipxe".
	Netdev string
	// NIC is the network device model (default virtio-net-pci); MAC its address.
	NIC, MAC string
	// ExtraArgs are appended to QEMU's command line.
	ExtraArgs []string
	// GracefulTimeout is how long GracefulRestart waits for the guest to
	// power off before giving up (default 2 minutes).
	GracefulTimeout time.Duration
	// HTTPClient fetches virtual media (http.DefaultClient if nil).
	HTTPClient *http.Client
	// Logger receives what the machine does.
	Logger *slog.Logger
}

// QEMUMachine is a Machine that runs a QEMU VM: power on starts QEMU,
// ForceOff quits it over QMP, GracefulShutdown presses the ACPI power
// button (system_powerdown), ForceRestart resets it (system_reset). The
// virtual CD is a fetched copy of the image, attached with QMP's
// blockdev-change-medium while the VM runs and with -drive at a start.
// The virtual USB stick is a read-only usb-storage device on an xHCI
// controller: plugged in (device_add) and pulled out (device_del) while
// the VM runs, as a real BMC's virtual USB stick comes and goes.
type QEMUMachine struct {
	cfg QEMUConfig
	log *slog.Logger

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	next    Boot // what the next start boots
	started Boot // what the running VM was started with
	media   map[Slot]string
	// httpBootFile is the image of the last UEFI HTTP boot fetched.
	httpBootFile string
	closed       bool
	// gen counts power actions: a graceful restart still waiting for
	// its guest to power off gives up when another action came after it.
	gen       int
	restartWG sync.WaitGroup
}

// NewQEMUMachine returns a powered-off machine; it starts nothing yet.
func NewQEMUMachine(cfg QEMUConfig) (*QEMUMachine, error) {
	if cfg.Dir == "" {
		return nil, errors.New("vbmc: a QEMU machine needs a Dir for its QMP socket and media cache")
	}
	if cfg.QEMU == "" {
		cfg.QEMU = "qemu-system-x86_64"
	}
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = 1024
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 1
	}
	if cfg.Console == "" {
		cfg.Console = filepath.Join(cfg.Dir, "console.log")
	}
	if cfg.OVMF == "" {
		cfg.OVMF = "/usr/share/ovmf/OVMF.fd"
	}
	if cfg.OVMFSecureCode == "" {
		cfg.OVMFSecureCode = "/usr/share/OVMF/OVMF_CODE_4M.ms.fd"
	}
	if cfg.OVMFSecureVars == "" {
		cfg.OVMFSecureVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
	}
	if cfg.Netdev == "" {
		cfg.Netdev = "user,id=n0"
	}
	if cfg.NIC == "" {
		cfg.NIC = "virtio-net-pci"
	}
	if cfg.GracefulTimeout == 0 {
		cfg.GracefulTimeout = 2 * time.Minute
	}
	if !strings.Contains(cfg.Netdev, "id=n0") {
		return nil, fmt.Errorf("vbmc: QEMU Netdev %q must have id=n0 (the NIC is attached to n0)", cfg.Netdev)
	}
	if len(cfg.socketPath()) > 100 {
		return nil, fmt.Errorf("vbmc: QMP socket path %s is too long for a unix socket; use a shorter Dir", cfg.socketPath())
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "media"), 0o755); err != nil {
		return nil, fmt.Errorf("vbmc: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &QEMUMachine{cfg: cfg, log: log, next: Boot{Device: BootHdd, Mode: ModeUEFI}, media: map[Slot]string{}}, nil
}

func (c QEMUConfig) socketPath() string { return filepath.Join(c.Dir, "qmp.sock") }

func (c QEMUConfig) serialPath() string { return filepath.Join(c.Dir, "serial.sock") }

// SerialSocket implements SerialConsole: the VM's serial port (ttyS0) as
// a unix socket, there while the VM runs.
func (m *QEMUMachine) SerialSocket() string { return m.cfg.serialPath() }

// secureVarsPath is the machine's copy of the Secure Boot firmware's
// variables.
func (c QEMUConfig) secureVarsPath() string { return filepath.Join(c.Dir, "OVMF_VARS.secure.fd") }

// Args returns QEMU's command line for a start with boot and the media
// files by slot (the CD drive is there, empty, without one; the USB stick
// only when it holds an image). Boot order is given by bootindex on the
// devices, which both SeaBIOS and OVMF honour.
func (m *QEMUMachine) Args(boot Boot, media map[Slot]string) ([]string, error) {
	c := m.cfg
	args := []string{"-m", strconv.Itoa(c.MemoryMB), "-smp", strconv.Itoa(c.CPUs),
		"-nographic", "-display", "none", "-monitor", "none",
		"-chardev", "socket,id=serial0,path=" + c.serialPath() + ",server=on,wait=off,logfile=" + c.Console,
		"-serial", "chardev:serial0",
		"-qmp", "unix:" + c.socketPath() + ",server=on,wait=off"}
	switch {
	case boot.Mode == ModeUEFI && boot.SecureBoot:
		for _, f := range []string{c.OVMFSecureCode, c.OVMFSecureVars} {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("UEFI Secure Boot needs the OVMF firmware with Secure Boot %s (Debian package ovmf): %v; or turn SecureBootEnable off", f, err)
			}
		}
		// Secure Boot's variables are writable from SMM only: q35 with
		// SMM, the flash's secure property, the code read-only.
		args = append(args, "-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on",
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file="+c.OVMFSecureCode,
			"-drive", "if=pflash,format=raw,unit=1,file="+c.secureVarsPath())
	case boot.Mode == ModeUEFI:
		if _, err := os.Stat(c.OVMF); err != nil {
			return nil, fmt.Errorf("boot mode UEFI needs the OVMF firmware %s (Debian package ovmf): %v; or set the boot mode to Legacy", c.OVMF, err)
		}
		args = append(args, "-bios", c.OVMF)
	}
	// The boot device first, then disk, network, CD, as a server's
	// default order would have it.
	order := []string{BootHdd, BootPxe, BootCd}
	switch boot.Device {
	case BootPxe:
		order = []string{BootPxe, BootHdd, BootCd}
	case BootCd:
		order = []string{BootCd, BootHdd, BootPxe}
	case BootHdd, BootBiosSetup, "":
	default:
		return nil, fmt.Errorf("unknown boot device %q", boot.Device)
	}
	index := map[string]int{}
	for i, d := range order {
		index[d] = i
	}
	if c.Disk != "" {
		args = append(args, "-drive", fmt.Sprintf("if=none,id=d0,file=%s,format=raw", c.Disk))
		dev := fmt.Sprintf("virtio-blk-pci,drive=d0,bootindex=%d", index[BootHdd])
		if c.DiskSerial != "" {
			dev += ",serial=" + c.DiskSerial
		}
		args = append(args, "-device", dev)
	}
	cd := "if=none,id=cd0,media=cdrom,readonly=on"
	if f := media[SlotCD]; f != "" {
		cd += ",format=raw,file=" + f
	}
	args = append(args, "-drive", cd, "-device", fmt.Sprintf("ide-cd,drive=cd0,id=cd,bootindex=%d", index[BootCd]))
	args = append(args, "-device", "qemu-xhci,id=xhci")
	if f := media[SlotUSB]; f != "" {
		args = append(args, "-blockdev", usbBlockdevArg(f), "-device", "usb-storage,drive="+usbNode+",id="+usbDevice+",removable=on,bus=xhci.0")
	}
	nic := fmt.Sprintf("%s,netdev=n0,bootindex=%d", c.NIC, index[BootPxe])
	if c.MAC != "" {
		nic += ",mac=" + c.MAC
	}
	args = append(args, "-netdev", c.Netdev, "-device", nic)
	if boot.Device == BootBiosSetup {
		// Firmware setup on a VM is the boot menu; the guest waits there.
		args = append(args, "-boot", "menu=on,splash-time=30000")
	}
	args = append(args, c.ExtraArgs...)
	for _, a := range args {
		if strings.Contains(a, "-vnc") || strings.Contains(a, "-spice") {
			return nil, errors.New("refusing to open a VNC or SPICE listener")
		}
	}
	return args, nil
}

// The QEMU ids of the virtual USB stick's block node and device.
const (
	usbNode   = "usb0"
	usbDevice = "usbstick"
)

func usbBlockdevArg(file string) string {
	return fmt.Sprintf("driver=raw,node-name=%s,read-only=on,file.driver=file,file.filename=%s,file.read-only=on", usbNode, file)
}

func (m *QEMUMachine) runningLocked() bool {
	if m.done == nil {
		return false
	}
	select {
	case <-m.done:
		return false
	default:
		return true
	}
}

// PoweredOn implements Machine.
func (m *QEMUMachine) PoweredOn() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runningLocked()
}

// SetBoot implements Machine. A UEFI HTTP boot's image is fetched here,
// as the firmware does at the start that follows, and the VM boots it as
// a CD under OVMF (the firmware's RAM disk of an HTTP-booted ISO); no
// virtual media slot holds it.
func (m *QEMUMachine) SetBoot(ctx context.Context, b Boot) error {
	if b.Device == BootUefiHttp {
		path := filepath.Join(m.cfg.Dir, "media", "httpboot.img")
		tmp, err := os.CreateTemp(filepath.Dir(path), ".fetch-*")
		if err != nil {
			return err
		}
		n, err := fetchHTTPBoot(ctx, m.cfg.HTTPClient, b.HTTPBootURI, tmp)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			os.Remove(tmp.Name())
			return err
		}
		b.HTTPBootSize = n
		m.mu.Lock()
		m.httpBootFile = path
		m.mu.Unlock()
		m.log.Info("qemu machine: UEFI HTTP boot image fetched", "bytes", n)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next = b
	return nil
}

func (m *QEMUMachine) startLocked() error {
	if m.closed {
		return errors.New("qemu machine is closed")
	}
	boot, media := m.next, m.media
	if boot.Device == BootUefiHttp {
		media = map[Slot]string{SlotCD: m.httpBootFile, SlotUSB: m.media[SlotUSB]}
		boot.Device = BootCd
	}
	args, err := m.Args(boot, media)
	if err != nil {
		return fmt.Errorf("qemu machine: %w", err)
	}
	if m.next.Mode == ModeUEFI && m.next.SecureBoot {
		if err := m.secureVars(); err != nil {
			return fmt.Errorf("qemu machine: %w", err)
		}
	}
	_ = os.Remove(m.cfg.socketPath())
	_ = os.Remove(m.cfg.serialPath())
	cmd := exec.Command(m.cfg.QEMU, args...)
	out, err := os.OpenFile(filepath.Join(m.cfg.Dir, "qemu.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("qemu machine: %w", err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// The VM dies with the process that runs the vBMC, even when killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("qemu machine: start %s: %w", m.cfg.QEMU, err)
	}
	done := make(chan struct{})
	m.cmd, m.done, m.started = cmd, done, m.next
	go func() { _ = cmd.Wait(); out.Close(); close(done) }()
	m.log.Info("qemu machine started", "boot", m.next.Device, "mode", m.next.Mode, "secure_boot", m.next.SecureBoot, "media", m.media, "pid", cmd.Process.Pid)
	// QMP must answer before the start counts: a VM whose QEMU refused
	// its command line exits at once, and the caller must hear of it.
	if _, err := m.qmpLocked(context.Background(), "query-status", nil); err != nil {
		m.killLocked()
		tail, _ := os.ReadFile(filepath.Join(m.cfg.Dir, "qemu.log"))
		return fmt.Errorf("qemu machine: VM did not come up: %v; qemu.log: %s", err, lastLines(string(tail), 5))
	}
	return nil
}

// secureVars makes the machine's copy of the Secure Boot variables from
// the template, once: later starts keep what the firmware wrote.
func (m *QEMUMachine) secureVars() error {
	dst := m.cfg.secureVarsPath()
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	b, err := os.ReadFile(m.cfg.OVMFSecureVars)
	if err != nil {
		return fmt.Errorf("UEFI Secure Boot variables: %w", err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// waitExitLocked waits up to d for QEMU to exit, with the lock released.
func (m *QEMUMachine) waitExitLocked(d time.Duration) bool {
	done := m.done
	if done == nil {
		return true
	}
	m.mu.Unlock()
	defer m.mu.Lock()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

func (m *QEMUMachine) killLocked() {
	if m.runningLocked() {
		_ = m.cmd.Process.Signal(syscall.SIGKILL)
		m.waitExitLocked(10 * time.Second)
	}
}

// stopLocked quits QEMU over QMP, killing it if it does not go.
func (m *QEMUMachine) stopLocked(ctx context.Context) {
	if !m.runningLocked() {
		return
	}
	if _, err := m.qmpLocked(ctx, "quit", nil); err == nil && m.waitExitLocked(5*time.Second) {
		return
	}
	m.killLocked()
}

// Power implements Machine.
func (m *QEMUMachine) Power(ctx context.Context, action ResetType) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gen++
	running := m.runningLocked()
	switch action {
	case ResetOn:
		if running {
			return nil
		}
		return m.startLocked()
	case ResetForceOff:
		m.stopLocked(ctx)
		return nil
	case ResetGracefulShutdown:
		if !running {
			return nil
		}
		_, err := m.qmpLocked(ctx, "system_powerdown", nil)
		return err
	case ResetForceRestart:
		if !running {
			return m.startLocked()
		}
		// A reset keeps QEMU's command line, so a new boot device or boot
		// mode needs a new QEMU; to the guest both are a hard reset.
		if m.started == m.next {
			_, err := m.qmpLocked(ctx, "system_reset", nil)
			return err
		}
		m.stopLocked(ctx)
		return m.startLocked()
	case ResetPowerCycle:
		m.stopLocked(ctx)
		return m.startLocked()
	case ResetGracefulRestart:
		if !running {
			return m.startLocked()
		}
		if _, err := m.qmpLocked(ctx, "system_powerdown", nil); err != nil {
			return err
		}
		// The guest takes its time to shut down; the BMC answered already.
		done, gen := m.done, m.gen
		m.restartWG.Add(1)
		go func() {
			defer m.restartWG.Done()
			select {
			case <-done:
			case <-time.After(m.cfg.GracefulTimeout):
				m.log.Warn("qemu machine: guest did not power off for a graceful restart; it keeps running", "timeout", m.cfg.GracefulTimeout)
				return
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			if m.closed || m.gen != gen || m.runningLocked() {
				return
			}
			if err := m.startLocked(); err != nil {
				m.log.Warn("qemu machine: start after a graceful restart failed", "err", err)
			}
		}()
		return nil
	}
	return fmt.Errorf("qemu machine: unknown reset type %q", action)
}

// InsertMedia implements Machine: the image is fetched into Dir/media
// first (a BMC streams it; QEMU needs a file), then attached.
func (m *QEMUMachine) InsertMedia(ctx context.Context, slot Slot, rawURL string) error {
	if err := knownSlot(slot); err != nil {
		return err
	}
	if err := checkMediaURL(rawURL); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(string(slot) + " " + rawURL))
	path := filepath.Join(m.cfg.Dir, "media", hex.EncodeToString(sum[:8])+".img")
	// Always fetched again: the same URL may serve new contents (per-boot
	// parameters), and a stale copy would boot the wrong thing.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".fetch-*")
	if err != nil {
		return err
	}
	c := m.cfg.HTTPClient
	if c == nil {
		c = http.DefaultClient
	}
	_, err = fetch(ctx, c, rawURL, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil && m.runningLocked() && slot == SlotUSB && m.media[SlotUSB] != "" {
		// A stick is plugged in: pull it out before its file is replaced.
		err = m.unplugUSBLocked(ctx)
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return err
	}
	m.media[slot] = path
	if m.runningLocked() {
		switch slot {
		case SlotCD:
			_, err = m.qmpLocked(ctx, "blockdev-change-medium", map[string]any{
				"id": "cd", "filename": path, "format": "raw", "read-only-mode": "read-only"})
		case SlotUSB:
			err = m.plugUSBLocked(ctx, path)
		}
		if err != nil {
			delete(m.media, slot)
			os.Remove(path)
			return fmt.Errorf("attach %s to the VM's %s: %w", rawURL, slot, err)
		}
	}
	m.log.Info("qemu machine media inserted", "slot", slot, "url", rawURL, "file", path)
	return nil
}

// plugUSBLocked plugs the virtual USB stick holding file into the running VM.
func (m *QEMUMachine) plugUSBLocked(ctx context.Context, file string) error {
	if _, err := m.qmpLocked(ctx, "blockdev-add", map[string]any{"driver": "raw", "node-name": usbNode, "read-only": true,
		"file": map[string]any{"driver": "file", "filename": file, "read-only": true}}); err != nil {
		return err
	}
	if _, err := m.qmpLocked(ctx, "device_add", map[string]any{"driver": "usb-storage", "id": usbDevice, "drive": usbNode,
		"removable": true, "bus": "xhci.0"}); err != nil {
		_, _ = m.qmpLocked(ctx, "blockdev-del", map[string]any{"node-name": usbNode})
		return err
	}
	return nil
}

// unplugUSBLocked pulls the virtual USB stick out of the running VM.
func (m *QEMUMachine) unplugUSBLocked(ctx context.Context) error {
	if _, err := m.qmpLocked(ctx, "device_del", map[string]any{"id": usbDevice}); err != nil && !strings.Contains(err.Error(), "not found") {
		return fmt.Errorf("unplug the VM's USB stick: %w", err)
	}
	// device_del completes asynchronously; the block node can go once
	// the device let go of it.
	var err error
	for i := 0; i < 50; i++ {
		if _, err = m.qmpLocked(ctx, "blockdev-del", map[string]any{"node-name": usbNode}); err == nil || strings.Contains(err.Error(), "Failed to find node") {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("release the VM's USB stick image: %w", err)
}

// EjectMedia implements Machine.
func (m *QEMUMachine) EjectMedia(ctx context.Context, slot Slot) error {
	if err := knownSlot(slot); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	file := m.media[slot]
	if file == "" {
		return nil
	}
	if m.runningLocked() {
		var err error
		switch slot {
		case SlotCD:
			// force: a guest that mounted the CD has locked its tray.
			_, err = m.qmpLocked(ctx, "eject", map[string]any{"id": "cd", "force": true})
		case SlotUSB:
			err = m.unplugUSBLocked(ctx)
		}
		if err != nil {
			return fmt.Errorf("eject the VM's %s: %w", slot, err)
		}
	}
	os.Remove(file)
	delete(m.media, slot)
	return nil
}

// Close powers the VM off and waits for a pending graceful restart.
func (m *QEMUMachine) Close() {
	m.mu.Lock()
	m.closed = true
	m.stopLocked(context.Background())
	m.mu.Unlock()
	m.restartWG.Wait()
}

// qmpLocked runs one QMP command on a connection of its own: QEMU serves
// one QMP client at a time, and a short connection leaves the socket
// free for an operator's socat between commands.
func (m *QEMUMachine) qmpLocked(ctx context.Context, command string, args any) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return qmpExec(ctx, m.cfg.socketPath(), command, args, m.done)
}

// qmpExec dials QEMU's QMP socket (waiting for it to appear while QEMU
// starts, unless exited closes), negotiates capabilities and runs command.
func qmpExec(ctx context.Context, sock, command string, args any, exited <-chan struct{}) (json.RawMessage, error) {
	var conn net.Conn
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", sock)
		if err == nil {
			conn = c
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("QMP %s: %w (last: %v)", command, ctx.Err(), err)
		case <-exited:
			return nil, fmt.Errorf("QMP %s: QEMU exited", command)
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	dec := json.NewDecoder(conn)
	enc := json.NewEncoder(conn)
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	if err := dec.Decode(&greeting); err != nil || greeting.QMP == nil {
		return nil, fmt.Errorf("QMP %s: no greeting from QEMU: %v", command, err)
	}
	call := func(cmd string, a any) (json.RawMessage, error) {
		msg := map[string]any{"execute": cmd}
		if a != nil {
			msg["arguments"] = a
		}
		if err := enc.Encode(msg); err != nil {
			return nil, err
		}
		for {
			var r struct {
				Return json.RawMessage `json:"return"`
				Error  *struct {
					Class string `json:"class"`
					Desc  string `json:"desc"`
				} `json:"error"`
				Event string `json:"event"`
			}
			if err := dec.Decode(&r); err != nil {
				return nil, err
			}
			switch {
			case r.Event != "":
				continue
			case r.Error != nil:
				return nil, fmt.Errorf("%s: %s", r.Error.Class, r.Error.Desc)
			default:
				return r.Return, nil
			}
		}
	}
	if _, err := call("qmp_capabilities", nil); err != nil {
		return nil, fmt.Errorf("QMP capabilities: %w", err)
	}
	out, err := call(command, args)
	if err != nil {
		return nil, fmt.Errorf("QMP %s: %w", command, err)
	}
	return out, nil
}
