package consolee2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/drivers/consoletest"
	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

func freeTCP(t *testing.T) string {
	return testrig.FreeAddr(t)
}

// guestCmdline is the console guest's kernel command line.
const guestCmdline = consoletest.GuestCmdline

func needQEMU(t *testing.T) string {
	t.Helper()
	qemu, err := exec.LookPath("qemu-system-x86_64")
	consoletest.Need(t, "qemu-system-x86_64 (Debian qemu-system-x86)", err)
	return qemu
}

// solActive tells whether the BMC's SOL payload (instance 1) is active:
// Get Payload Activation Status (IPMI v2.0 24.4, NetFn App 0x06, command
// 0x4a, payload type SOL 0x01), asked with ipmitool. Its answer is the
// instance capacity and a bitmap of the active instances.
func solActive(t *testing.T, sim *ipmisim.Sim) (bool, string) {
	t.Helper()
	out, err := sim.Ipmitool("raw", "0x06", "0x4a", "0x01")
	if err != nil {
		return false, fmt.Sprintf("ipmitool raw 0x06 0x4a 0x01: %v", err)
	}
	f := strings.Fields(out)
	if len(f) < 2 {
		return false, fmt.Sprintf("Get Payload Activation Status answered %q", out)
	}
	return f[1] != "00", "Get Payload Activation Status answered " + strings.TrimSpace(out)
}

// TestIPMIConsoleEndToEnd: a node of driver ipmi, console_interface
// ipmitool-socat, behind Debian's ipmi_sim whose Serial-over-LAN is a
// QEMU VM's serial port (QEMU is the chassis' power-on). The console is
// enabled through the API, the site opens SOL (the BMC says its payload is
// active), the node is powered on through the API: `coordinator node
// console` in a pty shows the kernel's boot messages and the guest's login
// prompt, logs in and runs a typed line on the VM; Debian's
// python3-websocket sees the same on the WebSocket and its typed line
// runs too.
func TestIPMIConsoleEndToEnd(t *testing.T) {
	t.Parallel()
	start := time.Now()
	defer func() { t.Logf("wall time %s", time.Since(start).Round(time.Second)) }()
	qemu := needQEMU(t)
	py := needPython(t)
	kernel, initrd := consoletest.Guest(t)
	// QEMU holds the VM until ipmi_sim is connected to its serial port
	// (wait=on): no boot message is printed before the BMC can relay it.
	serial := freeTCP(t)
	powerOn := fmt.Sprintf("exec %s -m 512 -nographic -display none -monitor none -no-reboot -nodefaults "+
		"-serial tcp:%s,server=on,wait=on -kernel %s -initrd %s -append '%s'",
		qemu, serial, kernel, initrd, guestCmdline)
	sim := ipmisim.StartTest(t, ipmisim.Options{SOL: serial, PowerOn: powerOn,
		Users: []ipmisim.User{{Name: "admin", Password: "sol-e2e-pw", Priv: "admin"}}})
	if active, detail := solActive(t, sim); active {
		t.Fatalf("SOL active before anyone activated it: %s", detail)
	}

	r := newRig(t)
	id := r.createNode("ipmi1", "ipmi", "ipmitool-socat", sim.DriverInfo())
	r.manage(id)
	wsURL := r.enableConsole(id)
	r.waitFor(2*time.Minute, "the site activates SOL at the BMC", func() (bool, string) {
		r.stillEnabled(id)
		return solActive(t, sim)
	})
	boot := time.Now()
	r.powerOn(id)
	r.waitLog(id, 3*time.Minute, "Linux version", consoletest.GuestReady, consoletest.GuestLogin)
	t.Logf("power-on to the login prompt in the coordinator's log: %s", time.Since(boot).Round(time.Second))

	r.cliConsole("ipmi1")
	r.wsConsole(py, wsURL)
	r.waitLog(id, time.Minute, "Welcome, cliuser", "climarker", "wsmarker")
	r.stillEnabled(id)
}

// redfishVM is a QEMU VM that boots the console guest behind the virtual
// Redfish BMC, with the BMC's SSH serial console.
type redfishVM struct {
	m   *vbmc.QEMUMachine
	dir string
	srv *vbmc.Server
	con *vbmc.SSHConsole
}

func newRedfishVM(t *testing.T, user, password string) *redfishVM {
	t.Helper()
	qemu := needQEMU(t)
	kernel, initrd := consoletest.Guest(t)
	// A short folder: the machine's unix sockets live there.
	dir, err := os.MkdirTemp("", "cone2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{QEMU: qemu, Dir: dir, MemoryMB: 512, GracefulTimeout: time.Second,
		ExtraArgs: []string{"-kernel", kernel, "-initrd", initrd, "-append", guestCmdline, "-no-reboot"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	// Legacy BIOS: SeaBIOS boots QEMU's -kernel at once (the BMC's boot
	// mode is what a power-on through Redfish starts the machine with).
	if err := m.SetBoot(context.Background(), vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeLegacy}); err != nil {
		t.Fatal(err)
	}
	b, err := vbmc.New(vbmc.Config{Username: user, Password: password, Systems: []vbmc.SystemConfig{{Machine: m, BootMode: vbmc.ModeLegacy}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	con, err := b.ServeSSHConsole(vbmc.SSHConsoleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { con.Close() })
	return &redfishVM{m: m, dir: dir, srv: srv, con: con}
}

// driverInfo is a redfish node's driver_info for this BMC, with its SSH
// console's port and host key (as ssh-keyscan prints it: "TYPE KEY").
func (v *redfishVM) driverInfo(user, password string) map[string]any {
	_, port, _ := net.SplitHostPort(v.con.Addr)
	return map[string]any{"redfish_address": v.srv.URL, "redfish_username": user, "redfish_password": password,
		"redfish_console_port":     port,
		"redfish_console_host_key": strings.TrimSpace(string(ssh.MarshalAuthorizedKey(v.con.HostKey)))}
}

// siteLog is the VM's serial output as QEMU logs it at the site, whoever
// is connected.
func (v *redfishVM) siteLog() string {
	b, _ := os.ReadFile(filepath.Join(v.dir, "console.log"))
	return string(b)
}

// TestRedfishConsoleEndToEnd: a node of driver redfish, console_interface
// redfish-serial-ssh, behind the virtual Redfish BMC whose SSH serial
// console is a QEMU VM's serial port; redfish_console_host_key is the
// BMC's host key. The console is enabled through the API (the site's SSH
// session attaches: the BMC's banner is in the log), the node is powered
// on through the API: `coordinator node console` in a pty shows the
// kernel's boot messages and the login prompt, logs in and runs a typed
// line on the VM; python3-websocket sees the same and its typed line runs.
func TestRedfishConsoleEndToEnd(t *testing.T) {
	t.Parallel()
	start := time.Now()
	defer func() { t.Logf("wall time %s", time.Since(start).Round(time.Second)) }()
	py := needPython(t)
	const user, password = "root", "rf-e2e-pw"
	v := newRedfishVM(t, user, password)
	r := newRig(t)
	id := r.createNode("rf1", "redfish", "redfish-serial-ssh", v.driverInfo(user, password))
	r.manage(id)
	wsURL := r.enableConsole(id)
	r.waitFor(2*time.Minute, "the site's SSH session attaches to the serial console", func() (bool, string) {
		r.stillEnabled(id)
		l := r.log(id)
		return strings.Contains(l, "Connected to the serial console"), fmt.Sprintf("the log holds %q", tail(l, 4))
	})
	boot := time.Now()
	r.powerOn(id)
	r.waitLog(id, 3*time.Minute, "Linux version", consoletest.GuestReady, consoletest.GuestLogin)
	t.Logf("power-on to the login prompt in the coordinator's log: %s", time.Since(boot).Round(time.Second))

	r.cliConsole("rf1")
	r.wsConsole(py, wsURL)
	r.waitLog(id, time.Minute, "Welcome, cliuser", "climarker", "wsmarker")
	r.stillEnabled(id)
}

// TestConsoleWANCutDuringBoot: the redfish node's console is enabled and
// attached, then the site's WAN link is cut (every connection closed, new
// ones refused) and the VM is powered on at the BMC (as someone at the
// site would): it boots to its login prompt during the outage (QEMU's log
// at the site shows it), and none of it reaches the coordinator. Once the
// link is back, GET console/log holds the boot messages printed during
// the outage, and the console still works: a line typed on the WebSocket
// runs on the VM.
func TestConsoleWANCutDuringBoot(t *testing.T) {
	t.Parallel()
	wanOutageDuringBoot(t, (*testrig.WANLink).Cut)
}

// TestConsoleWANSilentDuringBoot: the same with a silent outage, as a
// pulled cable or a dead router: the link carries nothing and closes
// nothing (testrig.WANLink.Blackhole), so the site learns of it only by
// its MQTT keepalive, and console output published meanwhile waits for an
// acknowledgement that does not come.
func TestConsoleWANSilentDuringBoot(t *testing.T) {
	t.Parallel()
	wanOutageDuringBoot(t, (*testrig.WANLink).Blackhole)
}

func wanOutageDuringBoot(t *testing.T, outage func(*testrig.WANLink)) {
	start := time.Now()
	defer func() { t.Logf("wall time %s", time.Since(start).Round(time.Second)) }()
	py := needPython(t)
	const user, password = "root", "rf-wan-pw"
	v := newRedfishVM(t, user, password)
	r := newRig(t)
	id := r.createNode("rf1", "redfish", "redfish-serial-ssh", v.driverInfo(user, password))
	r.manage(id)
	wsURL := r.enableConsole(id)
	r.waitFor(2*time.Minute, "the site's SSH session attaches to the serial console", func() (bool, string) {
		r.stillEnabled(id)
		l := r.log(id)
		return strings.Contains(l, "Connected to the serial console"), fmt.Sprintf("the log holds %q", tail(l, 4))
	})

	before, _ := os.ReadFile(r.agentLog)
	outage(r.wan)
	cut := time.Now()
	if err := v.m.Power(context.Background(), vbmc.ResetOn); err != nil {
		t.Fatal(err)
	}
	// The outage lasts until the VM is at its login prompt and the site
	// has noticed it (its agent's reconnection attempts fail: at once when
	// the link closes, after its MQTT keepalive when the link is silent).
	r.waitFor(4*time.Minute, "the VM boots to its login prompt at the site during the outage, and the site notices the outage", func() (bool, string) {
		l := v.siteLog()
		if !strings.Contains(l, "Linux version") || !strings.Contains(l, consoletest.GuestLogin) {
			return false, fmt.Sprintf("QEMU's log ends %q", tail(l, 4))
		}
		a, _ := os.ReadFile(r.agentLog)
		return len(a) > len(before) && strings.Contains(string(a[len(before):]), "mqtt connect failed"), "the agent's log shows no failed reconnection yet"
	})
	if l := r.log(id); strings.Contains(l, "Linux version") || strings.Contains(l, consoletest.GuestReady) {
		t.Fatalf("boot messages crossed a WAN link that was cut:\n%s", tail(l, 20))
	}
	r.wan.Restore()
	t.Logf("WAN down for %s", time.Since(cut).Round(time.Second))
	r.waitFor(3*time.Minute, "the edge agent connects again", func() (bool, string) {
		a, _ := os.ReadFile(r.agentLog)
		return strings.Contains(string(a[len(before):]), "edge agent connected"), "no new 'edge agent connected' in its log"
	})

	// Every kernel message QEMU logged at the site reached the
	// coordinator: the site's log from the kernel's first line ("Linux
	// version") to the guest's login prompt is, byte for byte, in the
	// coordinator's. (The BMC's SSH console connects to the serial port
	// a moment after QEMU starts, as a real BMC's would; what the
	// firmware prints before is in QEMU's log only.)
	r.waitLog(id, 3*time.Minute, "Linux version", consoletest.GuestReady, consoletest.GuestLogin)
	site, coord := v.siteLog(), r.log(id)
	site = site[:strings.Index(site, consoletest.GuestLogin)+len(consoletest.GuestLogin)]
	site = site[strings.LastIndex(site[:strings.Index(site, "Linux version")], "\n")+1:]
	coord = coord[strings.LastIndex(coord[:strings.Index(coord, "Linux version")], "\n")+1:]
	if n, doubled, ok := relayed(site, coord); !ok {
		t.Fatalf("the coordinator's console log differs from what the VM printed during the outage after %d bytes: the VM printed %q, the log holds %q",
			n, tail(site[:min(len(site), n+200)], 3), tail(coord[:min(len(coord), n-doubled+200)], 3))
	} else {
		t.Logf("the %d bytes (%d lines) the VM printed during the outage are in the console log (QEMU's log file holds %d of them twice)",
			len(site)-doubled, strings.Count(site, "\n"), doubled)
	}
	r.wsConsole(py, wsURL)
	r.waitLog(id, time.Minute, "wsmarker")
	r.stillEnabled(id)
}

// relayed tells whether coord begins with what the console printed, as
// site, QEMU's chardev log file, holds it: under load that file holds
// some bytes twice ("QEEMU", "rreserved") where the serial socket's
// reader, the BMC's console, got them once, so site may have bytes that
// repeat the one before them where coord has them once. It returns how
// far the two agree in site, how many bytes of site were such repeats,
// and whether all of site was matched.
func relayed(site, coord string) (at, doubled int, ok bool) {
	i, j := 0, 0
	for i < len(site) {
		switch {
		case j < len(coord) && site[i] == coord[j]:
			i++
			j++
		case i > 0 && site[i] == site[i-1]:
			i++
			doubled++
		default:
			return i, doubled, false
		}
	}
	return i, doubled, true
}
