package ramdisk_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/agent/netboot/labnet"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/lib/bootmedia"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// The QEMU lab every test of this package boots its VMs in: a coordinator
// and its site "lab" with an edge agent (newLab), the site's machines
// (qemu-dev nodes the agent starts, QEMU VMs behind a virtual Redfish BMC
// or behind ipmi_sim), and bare VMs a test starts itself (startVM).

// Debian's UEFI firmware for QEMU (package ovmf, which
// scripts/build-ramdisk.sh installs): plain, and with Secure Boot on and
// Microsoft's keys enrolled (the code as a read-only flash, a copy of the
// variables beside it). And Debian's GRUB for CDs unsigned (package
// grub-efi-amd64-bin): the same program as the ISO's signed one, without
// the signature.
const (
	ovmfFirmware   = "/usr/share/ovmf/OVMF.fd"
	ovmfSecureCode = "/usr/share/OVMF/OVMF_CODE_4M.ms.fd"
	ovmfSecureVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
	unsignedGRUB   = "/usr/lib/grub/x86_64-efi/monolithic/gcdx64.efi"
)

// ansiEscape matches a terminal escape (firmware menus print them).
var ansiEscape = regexp.MustCompile(`\x1b\[[0-9;?]*[a-zA-Z]`)

// labOptions says what a lab runs. The zero value is a coordinator with a
// 3-minute WAIT timeout (a ramdisk under TCG on a loaded 2-core machine:
// the rig's 30 s ran out before a crash-looping ramdisk had booted twice)
// and the site's edge agent with its site broker on loopback, which the
// VMs reach at 10.0.2.2 (QEMU's user network maps it to the host's
// loopback): the ramdisks talk to it, never to the coordinator's broker.
type labOptions struct {
	// Kernel and Initrd: the agent's qemu-dev driver boots them (-kernel).
	Kernel, Initrd string
	// ISO: the agent serves the ramdisk ISO to the BMCs as virtual media.
	ISO string
	// Netboot: the site network of the test's own (labnet), on whose
	// bridge the agent serves network boot of NetKernel and NetInitrd,
	// with its site broker on the site's address (port 1883).
	Netboot              *labnet.Net
	NetKernel, NetInitrd string
	// CoordinatorTLS: the coordinator's API and broker speak only TLS,
	// with a certificate of the lab CA for 127.0.0.1 and 10.0.2.2, which
	// the edge agent trusts. SiteTLS: the site broker (mqtts) and the
	// Redfish BMCs too; the ramdisk trusts the CA by its pin.
	CoordinatorTLS, SiteTLS bool
	// ImageCache: the agent runs the site image cache, which the VMs
	// reach at 10.0.2.2, its origins allowed on loopback.
	ImageCache bool
	// WaitTimeout replaces the 5 minutes (a ramdisk boot under TCG with
	// three guests and the race run beside them took over 3).
	WaitTimeout time.Duration
	// PriorityOverrides are the coordinator's clean step priorities.
	PriorityOverrides map[string]int
	// NoAutomatedClean: provide does not clean.
	NoAutomatedClean bool
	// Log is the coordinator's and the agent's log (default the test's);
	// AgentLog, when set, the agent's.
	Log, AgentLog *slog.Logger
	// NoAgent: the test runs the site's edge agent itself, with lab.creds.
	NoAgent bool
	// WAN: the agent reaches the coordinator's broker through a link the
	// test cuts and restores (lab.wan).
	WAN bool
}

// lab is a running lab.
type lab struct {
	t     *testing.T
	c     *server.Coordinator
	cl    *testrig.Client
	creds agent.Credentials
	agent *agent.Agent
	// dataDir is the coordinator's data folder.
	dataDir string
	// cert, key and ca are the lab CA's files (with either TLS option).
	cert, key, ca string
	siteTLS       bool
	log           *slog.Logger
	// wan is the site's link to the coordinator (labOptions.WAN).
	wan *testrig.WANLink
}

// newLab starts the coordinator, registers site "lab" and starts its edge
// agent; all of it stops when the test ends.
func newLab(t *testing.T, o labOptions) *lab {
	t.Helper()
	l := &lab{t: t, dataDir: t.TempDir(), siteTLS: o.SiteTLS, log: o.Log}
	if l.log == nil {
		l.log = testrig.Logger(t)
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = 5 * time.Minute
	}
	ro := testrig.Options{DataDir: l.dataDir, Log: o.Log, NoAutomatedClean: o.NoAutomatedClean,
		Machine: fsm.Config{WaitTimeout: o.WaitTimeout, PriorityOverrides: o.PriorityOverrides}}
	if o.CoordinatorTLS || o.SiteTLS {
		l.cert, l.key, l.ca = testrig.LabCerts(t, "127.0.0.1", "10.0.2.2")
	}
	if o.CoordinatorTLS {
		ro.TLSCert, ro.TLSKey, ro.CACert = l.cert, l.key, l.ca
	}
	l.c = testrig.Coordinator(t, ro)
	if o.CoordinatorTLS && !strings.HasPrefix(l.c.BrokerURL, "mqtts://") {
		t.Fatalf("broker URL %s with TLS on", l.c.BrokerURL)
	}
	l.cl = testrig.NewClient(t, l.c)
	if code := l.cl.Do("POST", "/v1/sites", map[string]string{"name": "lab"}, &l.creds); code != 201 {
		t.Fatalf("site: %d", code)
	}
	if o.NoAgent {
		return l
	}
	if o.AgentLog == nil {
		o.AgentLog = o.Log
	}
	cfg := agent.Config{Log: o.AgentLog, SiteBroker: agent.SiteBrokerOptions{Listen: "127.0.0.1:0", URL: "mqtt://10.0.2.2"}}
	if o.CoordinatorTLS {
		cfg.CAFile = l.ca
	}
	if o.SiteTLS {
		cfg.SiteBroker = agent.SiteBrokerOptions{Listen: "127.0.0.1:0", URL: "mqtts://10.0.2.2", TLSCert: l.cert, TLSKey: l.key, CAFile: l.ca}
	}
	if o.Kernel != "" {
		cfg.QEMU = agent.QEMUOptions{Kernel: o.Kernel, Initrd: o.Initrd}
	}
	if o.ISO != "" {
		cfg.Ramdisk = agent.RamdiskOptions{ISO: o.ISO, Listen: "127.0.0.1:0"}
	}
	if o.ImageCache {
		cache := testrig.FreeAddr(t)
		_, port, _ := net.SplitHostPort(cache)
		cfg.Cache = agent.ImageCacheOptions{Dir: t.TempDir(), Listen: cache, URL: "http://10.0.2.2:" + port,
			FetchAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
	}
	if site := o.Netboot; site != nil {
		cfg.SiteBroker = agent.SiteBrokerOptions{Listen: site.Addr.String() + ":1883"}
		cfg.Netboot = agent.NetbootOptions{Interface: site.Bridge, Range: "10.77.0.100-10.77.0.120", Router: site.Addr.String(),
			Kernel: o.NetKernel, Initrd: o.NetInitrd}
	}
	creds := l.creds
	if o.WAN {
		u, err := neturl.Parse(creds.BrokerURL)
		if err != nil {
			t.Fatal(err)
		}
		l.wan = testrig.NewWANLink(t, u.Host)
		u.Host = l.wan.Addr()
		creds.BrokerURL = u.String()
	}
	l.agent = testrig.StartAgentConfig(t, creds, cfg)
	return l
}

// serveHTTP serves h on a loopback port until the test ends and returns
// the port: the guests reach it at 10.0.2.2, the host at 127.0.0.1.
func serveHTTP(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// serveFile serves b at path on a loopback port until the test ends
// and returns its URL for the guests.
func serveFile(t *testing.T, path string, b []byte) string {
	t.Helper()
	return "http://10.0.2.2:" + serveHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		w.Write(b)
	}) + path
}

// stop closes the coordinator before the test ends (it is closed once).
func (l *lab) stop() { l.c.Close() }

// createNode creates a node of the site and returns its UUID.
func (l *lab) createNode(name, driver string, info, props map[string]any) string {
	l.t.Helper()
	body := map[string]any{"name": name, "driver": driver, "conductor_group": "lab", "driver_info": info}
	if props != nil {
		body["properties"] = props
	}
	var n testrig.Node
	if code := l.cl.Do("POST", "/v1/nodes", body, &n); code != 201 {
		l.t.Fatalf("create %s: %d", name, code)
	}
	return n.UUID
}

// wait waits until the node rests after verb, logs how it ended and fails
// the test unless it rests in want.
func (l *lab) wait(id, verb, want string, timeout time.Duration) testrig.Node {
	l.t.Helper()
	return l.waitSince(id, verb, want, timeout, time.Time{})
}

func (l *lab) waitSince(id, verb, want string, timeout time.Duration, start time.Time) testrig.Node {
	l.t.Helper()
	got := l.cl.WaitRest(id, timeout)
	took := ""
	if !start.IsZero() {
		took = fmt.Sprintf(" in %.1fs", time.Since(start).Seconds())
	}
	l.t.Logf("%s: %s%s %s", verb, got.State, took, got.LastError)
	if got.State != want {
		l.t.Fatalf("%s ended in %q, want %q: %s", verb, got.State, want, got.LastError)
	}
	return got
}

// step puts the provision target verb (with extra in the request) and
// waits until the node rests in want.
func (l *lab) step(id, verb, want string, extra map[string]any, timeout time.Duration) testrig.Node {
	l.t.Helper()
	start := time.Now()
	l.cl.MustVerb(id, verb, extra)
	return l.waitSince(id, verb, want, timeout, start)
}

// patch applies JSON patch operations to a node.
func (l *lab) patch(id string, ops ...map[string]any) {
	l.t.Helper()
	if code := l.cl.Do("PATCH", "/v1/nodes/"+id, ops, nil); code != 200 {
		l.t.Fatalf("patch %s: %d", id, code)
	}
}

// smallVM creates a qemu-dev node with a 64 MiB disk of random data and
// 512 MiB of memory (extra adds driver_info) and manages it; it returns
// the node's UUID and its console log.
func (l *lab) smallVM(dir, name string, extra map[string]any) (id, console string) {
	l.t.Helper()
	diskPath := filepath.Join(dir, name+".raw")
	randomFile(l.t, diskPath, 64<<20, uint64(len(name)))
	console = filepath.Join(dir, name+"-console.log")
	info := map[string]any{"qemu_disk": diskPath, "qemu_console": console, "qemu_memory_mb": 512}
	for k, v := range extra {
		info[k] = v
	}
	id = l.createNode(name, "qemu-dev", info, nil)
	l.cl.MustVerb(id, "manage", nil)
	if got := l.cl.WaitRest(id, 30*time.Second); got.State != "manageable" {
		l.t.Fatalf("manage %s: %q %q", name, got.State, got.LastError)
	}
	return id, console
}

// vmDir is a folder for a VM behind a BMC, removed when the test ends: a
// short path under the system's temporary folder, as the QMP socket in it
// must be (unix socket paths are limited to 108 bytes).
func vmDir(t *testing.T, prefix string) string {
	t.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// showConsole logs the end of a console log (n bytes, terminal escapes
// left out) when the test fails.
func showConsole(t *testing.T, console string, n int) {
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(console)
			t.Logf("%s (last %d KiB, terminal escapes left out):\n%s", filepath.Base(console), n>>10, tail(ansiEscape.ReplaceAll(b, []byte(" ")), n))
		}
	})
}

// bmcOptions says what stands behind a virtual Redfish BMC of the lab.
type bmcOptions struct {
	// Dir is the VM's folder (vmDir); Disk its raw disk, DiskSerial the
	// disk's serial; MemoryMB its memory (default 1024); Console its serial
	// console; Netdev QEMU's -netdev (default user networking).
	Dir, Disk, DiskSerial string
	MemoryMB              int
	Console, Netdev       string
	// SecureBoot: the firmware for UEFI with Secure Boot is Debian's OVMF
	// with Microsoft's keys.
	SecureBoot bool
	// Memory: no VM, a machine in memory, and a BMC without the
	// SecureBoot resource.
	Memory bool
}

// labBMC is a virtual Redfish BMC (user admin, password s3cret) of one
// system in Legacy mode, 1 CPU and 1 GiB, over TLS when the lab's site
// is. Its machine counts its starts.
type labBMC struct {
	*vbmc.BMC
	url, sysID string
	starts     *startCounter
	memory     *vbmc.MemoryMachine
	lab        *lab
}

// redfishBMC starts a BMC; it stops when the test ends.
func (l *lab) redfishBMC(o bmcOptions) *labBMC {
	t := l.t
	t.Helper()
	b := &labBMC{lab: l}
	var sys vbmc.SystemConfig
	if o.Memory {
		b.memory = vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
		sys = vbmc.SystemConfig{Machine: b.memory, NoSecureBoot: true}
	} else {
		qemu, _ := exec.LookPath("qemu-system-x86_64")
		cfg := vbmc.QEMUConfig{QEMU: qemu, Dir: o.Dir, Disk: o.Disk, DiskSerial: o.DiskSerial, MemoryMB: o.MemoryMB,
			Console: o.Console, Netdev: o.Netdev, Logger: l.log}
		if cfg.MemoryMB == 0 {
			cfg.MemoryMB = 1024
		}
		if o.SecureBoot {
			cfg.OVMFSecureCode, cfg.OVMFSecureVars = ovmfSecureCode, ovmfSecureVars
		}
		machine, err := vbmc.NewQEMUMachine(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(machine.Close)
		b.starts = &startCounter{Machine: machine}
		sys = vbmc.SystemConfig{Machine: b.starts, BootMode: vbmc.ModeLegacy, CPUs: 1, MemoryGiB: 1}
	}
	bmc, err := vbmc.New(vbmc.Config{Username: "admin", Password: "s3cret", Systems: []vbmc.SystemConfig{sys}, Logger: l.log})
	if err != nil {
		t.Fatal(err)
	}
	b.BMC = bmc
	so := vbmc.ServeOptions{}
	if l.siteTLS {
		so = vbmc.ServeOptions{CertFile: l.cert, KeyFile: l.key}
	}
	srv, err := vbmc.Serve(bmc, so)
	if err != nil {
		t.Fatal(err)
	}
	// Stopped before the machine (cleanups run last first).
	t.Cleanup(func() { srv.Close(); bmc.Close() })
	b.url, b.sysID = srv.URL, bmc.SystemIDs()[0]
	return b
}

// driverInfo is a redfish node's driver_info for the BMC, with password
// (the lab CA to verify the BMC with, when it speaks TLS).
func (b *labBMC) driverInfo(password string) map[string]any {
	info := map[string]any{"redfish_address": b.url, "redfish_system_id": b.sysID, "redfish_username": "admin", "redfish_password": password}
	if b.lab.siteTLS {
		info["redfish_verify_ca"] = b.lab.ca
	}
	return info
}

// state is what the BMC shows of its system.
func (b *labBMC) state() vbmc.SystemState {
	st, _ := b.State(b.sysID)
	return st
}

// waitCDBoot waits until a QEMU of the VM folder runs booting from the
// CD and returns its command line.
func waitCDBoot(t *testing.T, dir string, d time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("no QEMU booting from the CD; running: %q", qemuCmdlines(t, dir))
		}
		time.Sleep(100 * time.Millisecond)
		for _, l := range qemuCmdlines(t, dir) {
			if strings.Contains(l, "id=cd,bootindex=0") {
				return l
			}
		}
	}
}

// qemuCmdlines returns the command lines of the running QEMU processes
// whose arguments mention dir.
func qemuCmdlines(t *testing.T, dir string) []string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []string
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("qemu-system")) || !bytes.Contains(b, []byte(dir)) {
			continue
		}
		out = append(out, strings.ReplaceAll(strings.TrimRight(string(b), "\x00"), "\x00", " "))
	}
	return out
}

// ipmiVMOptions says what VM an ipmi_sim BMC's power-on starts: 1 CPU,
// 1024 MiB, on UEFI (OVMF; with SecureBoot the Secure Boot firmware with
// Microsoft's keys and a fresh copy of its variables at each start), its
// disk (serial DISK0) and a NIC on the site network's tap whose own
// option ROM is removed (the firmware's PXE client runs); it boots from
// the network when the BMC's boot device is pxe, else from the disk.
type ipmiVMOptions struct {
	Disk, Console, Tap, MAC string
	SecureBoot              bool
	// Dir holds the firmware's variables (SecureBoot).
	Dir string
}

// ipmiBMC starts ipmi_sim with the VM as its chassis; power-off kills it.
func (l *lab) ipmiBMC(o ipmiVMOptions) *ipmisim.Sim {
	l.t.Helper()
	qemu, _ := exec.LookPath("qemu-system-x86_64")
	firmware := "-m 1024 -nographic -monitor none -bios " + ovmfFirmware
	prep := ""
	if o.SecureBoot {
		vars := filepath.Join(o.Dir, "OVMF_VARS.fd")
		prep = fmt.Sprintf("cp %s %s || exit 1\n", ovmfSecureVars, vars)
		firmware = fmt.Sprintf("-machine q35,smm=on -global driver=cfi.pflash01,property=secure,value=on \\\n"+
			"  -drive if=pflash,format=raw,unit=0,readonly=on,file=%s -drive if=pflash,format=raw,unit=1,file=%s \\\n"+
			"  -m 1024 -smp 1 -display none -monitor none", ovmfSecureCode, vars)
	}
	vm := fmt.Sprintf(`if [ "$BM_IPMISIM_BOOT" = pxe ]; then NB=1; DB=2; else NB=2; DB=1; fi
%sexec %s %s \
  -chardev file,id=c0,path=%s,append=on -serial chardev:c0 -device virtio-rng-pci \
  -drive file=%s,format=raw,if=none,id=d0 -device virtio-blk-pci,drive=d0,serial=DISK0,bootindex=$DB \
  -netdev tap,id=n0,ifname=%s,script=no,downscript=no -device virtio-net-pci,netdev=n0,mac=%s,romfile=,bootindex=$NB`,
		prep, qemu, firmware, o.Console, o.Disk, o.Tap, o.MAC)
	return ipmisim.StartTest(l.t, ipmisim.Options{PowerOn: vm})
}

// vmSpec is a bare VM a test starts itself (no BMC, no agent): 1 CPU,
// 1024 MiB (MemoryMB replaces it), its serial console in a file, no
// reboot (QEMU exits when the guest reboots or powers off).
type vmSpec struct {
	// Firmware: "" for SeaBIOS, an OVMF image for -bios, or
	// ovmfSecureCode for q35 with SMM, the Secure Boot code read-only and
	// a fresh copy of its variables with Microsoft's keys.
	Firmware string
	MemoryMB int
	// Console is the serial console's file (default one in a new folder).
	Console string
	// Args are the VM's devices.
	Args []string
}

// qemuArgs is QEMU's command line for the VM.
func (s vmSpec) qemuArgs(t *testing.T) []string {
	t.Helper()
	mem := s.MemoryMB
	if mem == 0 {
		mem = 1024
	}
	var args []string
	switch s.Firmware {
	case "":
	case ovmfSecureCode:
		vars := filepath.Join(t.TempDir(), "OVMF_VARS.fd")
		b, err := os.ReadFile(ovmfSecureVars)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(vars, b, 0o600); err != nil {
			t.Fatal(err)
		}
		args = []string{"-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on",
			"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + ovmfSecureCode,
			"-drive", "if=pflash,format=raw,unit=1,file=" + vars}
	default:
		args = []string{"-bios", s.Firmware}
	}
	args = append(args, "-m", fmt.Sprint(mem), "-smp", "1", "-display", "none", "-monitor", "none", "-no-reboot",
		"-serial", "file:"+s.Console)
	return append(args, s.Args...)
}

// startVM starts the VM; it returns its console log and a channel closed
// when QEMU exits. The VM is killed when the test ends; if the test
// failed, QEMU's output and the console's end are logged.
func startVM(t *testing.T, s vmSpec) (string, <-chan struct{}) {
	t.Helper()
	if s.Console == "" {
		s.Console = filepath.Join(t.TempDir(), "console.log")
	}
	cmd := exec.Command("qemu-system-x86_64", s.qemuArgs(t)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-done
		if t.Failed() {
			b, _ := os.ReadFile(s.Console)
			// The firmware's menus are terminal escapes: left out.
			b = ansiEscape.ReplaceAll(b, []byte(" "))
			t.Logf("QEMU output: %s\nVM console (last 6 KiB, terminal escapes left out):\n%s", out.String(), tail(b, 6144))
		}
	})
	return s.Console, done
}

// usbCD is QEMU's arguments for an image as a BMC's virtual media: a USB
// CD-ROM on an xHCI controller, the first boot device; and, when params
// is not "", the boot parameters medium as a read-only USB stick.
func usbCD(t *testing.T, iso, params string) []string {
	args := []string{"-device", "qemu-xhci,id=xhci",
		"-drive", "if=none,id=cd0,media=cdrom,format=raw,readonly=on,file=" + iso,
		"-device", "usb-bot,id=bot0,bus=xhci.0", "-device", "scsi-cd,bus=bot0.0,drive=cd0,bootindex=0"}
	if params != "" {
		p := filepath.Join(t.TempDir(), "params.iso")
		img, err := bootmedia.ParamsImage(params)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, img, 0o444); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-drive", "if=none,id=p0,format=raw,readonly=on,file="+p,
			"-device", "usb-storage,bus=xhci.0,drive=p0,removable=on")
	}
	return args
}
