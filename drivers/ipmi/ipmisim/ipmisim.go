// Package ipmisim runs Debian's ipmi_sim (package openipmi) as a real IPMI
// BMC for tests, and only for tests: nothing in a program may import it.
//
// A Sim listens on 127.0.0.1 only, on a free UDP port, with its own
// lan.conf, emulation file, state directory and chassis control script, all
// in one folder. The script keeps the chassis' power and boot device in a
// state file (no VM is needed) and appends every chassis action ipmi_sim
// asks of it to an events file, so that a test can see what really reached
// the "hardware". Optionally each power-on runs a command (Options.PowerOn),
// detached in its own process group and killed at power-off, so that a lab
// can start a VM with it.
//
// Facts about ipmi_sim 2.0.33 (Debian 12) that shape this rig:
//   - Only RMCP+ cipher suite 3 works (ipmitool -C 3).
//   - Boot flags (Set/Get System Boot Options parameter 5): ipmi_sim passes
//     only the device selector to the script and answers a read with the
//     valid, persistent and EFI bits always 0. Once vs persistent and the
//     boot mode are therefore not observable here.
//   - Parameter 0 (set in progress) is refused with 0xcc; parameter 3
//     (boot flag valid bit clearing) is accepted and ignored.
//   - Power cycle is power off then power on one second later; a hard reset
//     reaches the script as "set reset 1", a soft shutdown as "set shutdown 1".
//   - Cold and warm BMC reset are not implemented (0xc1, invalid command).
//   - Users kept in the state directory override lan.conf: a Sim's state
//     directory is fresh on Start and kept across Restart.
package ipmisim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// User is one IPMI user of the simulated BMC.
type User struct {
	Name, Password string
	// Priv is the user's highest privilege: "admin", "operator", "user".
	Priv string
}

// Options shape a simulated BMC.
type Options struct {
	// Users of the BMC; default one administrator, admin / password.
	Users []User
	// PowerOn, if set, is a shell command run each time the chassis goes
	// from off to on, detached in its own process group with stdin, stdout
	// and stderr away from ipmi_sim (which waits for the script's output);
	// its output goes to power-on.log in the Sim's folder. Its environment
	// has BM_IPMISIM_BOOT, the boot device in force (pxe, default = disk,
	// cdrom, bios, none). Power-off, a hard reset and Close kill its group.
	PowerOn string
	// Sensors are threshold sensors in the BMC's SDR repository; SEL are
	// entries of its system event log, whose size is SELSize entries
	// (default 1000 when SEL is set). See sensors.go.
	Sensors []Sensor
	SEL     []SELEvent
	SELSize int
	// SerialKCS, when set (HOST:PORT), is where ipmi_sim takes a QEMU
	// VM's system interface (QEMU's ipmi-bmc-extern, chardev socket, with
	// isa-ipmi-kcs): the VM's kernel IPMI driver talks to this BMC in
	// band.
	SerialKCS string
	// SOL, when set (HOST:PORT), is a TCP serial port (QEMU's
	// -serial tcp:HOST:PORT,server=on,wait=off) that ipmi_sim connects to
	// and serves as Serial-over-LAN (payload instance 1) at 115200 baud.
	// ipmi_sim keeps retrying the connection (every few seconds), so the
	// VM may start later; with wait=on QEMU holds the VM until ipmi_sim is
	// connected and no boot message is lost.
	SOL string
}

// Sim is one running ipmi_sim.
type Sim struct {
	// Host and Port are where the BMC listens (UDP).
	Host string
	Port int
	// Dir holds lan.conf, sim.emu, the script, the state and the logs.
	Dir string

	opts Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts a simulated BMC in a new temporary folder. Call Close when
// done (StartTest does it for a test). A missing ipmi_sim or ipmitool is an
// error wrapping exec.ErrNotFound, so that tests can tell it from a failure.
func Start(opts Options) (*Sim, error) {
	for _, tool := range []string{"ipmi_sim", "ipmitool"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("ipmisim: %s is not installed (Debian packages openipmi and ipmitool; scripts/install-test-deps.sh installs them): %w", tool, err)
		}
	}
	if len(opts.Users) == 0 {
		opts.Users = []User{{Name: "admin", Password: "password", Priv: "admin"}}
	}
	dir, err := os.MkdirTemp("", "ipmisim-")
	if err != nil {
		return nil, fmt.Errorf("ipmisim: %w", err)
	}
	s := &Sim{Host: "127.0.0.1", Dir: dir, opts: opts}
	if err := os.Mkdir(s.path("state"), 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("ipmisim: %w", err)
	}
	if err := s.writeScript(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	// Another process may take the free port between our probe and
	// ipmi_sim's bind: try a few ports.
	for try := 0; ; try++ {
		if s.Port, err = freeUDPPort(); err != nil {
			break
		}
		if err = s.writeConfig(); err != nil {
			break
		}
		if err = s.start(); err == nil || try == 4 {
			break
		}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// StartTest starts a simulated BMC that the test's cleanup stops, also
// when the test fails. A missing tool skips the test, unless
// BM_REQUIRE_ALL=1 (make test) demands every real component.
func StartTest(t testing.TB, opts Options) *Sim {
	t.Helper()
	s, err := Start(opts)
	if errors.Is(err, exec.ErrNotFound) && os.Getenv("BM_REQUIRE_ALL") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func (s *Sim) path(name string) string { return filepath.Join(s.Dir, name) }

// Addr is host:port of the BMC.
func (s *Sim) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// DriverInfo is the driver_info of a node behind this BMC, as Ironic's
// ipmi hardware type spells it, for its first user.
func (s *Sim) DriverInfo() map[string]any {
	u := s.opts.Users[0]
	return map[string]any{
		"ipmi_address":      s.Host,
		"ipmi_port":         float64(s.Port), // as JSON decodes it
		"ipmi_username":     u.Name,
		"ipmi_password":     u.Password,
		"ipmi_cipher_suite": "3",
	}
}

func freeUDPPort() (int, error) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("ipmisim: find a free UDP port: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

// writeScript writes the chassis control script. ipmi_sim runs it as
// "chassis 0x20 get power boot" (answer "power:1" and "boot:pxe" lines)
// and "chassis 0x20 set power 1 ..." and waits for it, so it must be quick
// and must not leave anything holding its stdout.
func (s *Sim) writeScript() error {
	script := `#!/bin/sh
# Chassis control for ipmi_sim, written by drivers/ipmi/ipmisim for tests.
# State: power and boot device in chassis.state; every "set" is appended to
# chassis.events. Files that change behaviour: stuck (power requests are
# ignored), ignore-soft-off (the "OS" does not react to a soft shutdown),
# power-on (run at each power-on, killed at power-off).
D=` + shellQuote(s.Dir) + `
state="$D/chassis.state"
[ -f "$state" ] || printf 'power=0\nboot=default\n' >"$state"
. "$state"

on() {
	if [ "$power" != 1 ] && [ -x "$D/power-on" ]; then
		BM_IPMISIM_BOOT=$boot setsid "$D/power-on" </dev/null >>"$D/power-on.log" 2>&1 &
		echo $! >"$D/power-on.pid"
	fi
	power=1
}
off() {
	if [ -f "$D/power-on.pid" ]; then
		kill -KILL "-$(cat "$D/power-on.pid")" 2>/dev/null
		rm -f "$D/power-on.pid"
	fi
	power=0
}

shift
op=$1
shift
case "$op" in
get)
	for p in "$@"; do
		case "$p" in
		power) echo "power:$power" ;;
		boot) echo "boot:$boot" ;;
		esac
	done
	;;
set)
	while [ $# -ge 2 ]; do
		echo "$1 $2" >>"$D/chassis.events"
		case "$1" in
		power)
			if [ -e "$D/stuck" ]; then :; elif [ "$2" = 1 ]; then on; else off; fi ;;
		boot) boot=$2 ;;
		reset)
			if [ "$power" = 1 ] && [ ! -e "$D/stuck" ]; then off; on; fi ;;
		shutdown)
			if [ ! -e "$D/ignore-soft-off" ] && [ ! -e "$D/stuck" ]; then off; fi ;;
		esac
		shift 2
	done
	printf 'power=%s\nboot=%s\n' "$power" "$boot" >"$state.tmp" && mv "$state.tmp" "$state"
	;;
esac
exit 0
`
	if err := os.WriteFile(s.path("chassis"), []byte(script), 0o755); err != nil {
		return fmt.Errorf("ipmisim: %w", err)
	}
	if s.opts.PowerOn != "" {
		cmd := "#!/bin/sh\n" + s.opts.PowerOn + "\n"
		if err := os.WriteFile(s.path("power-on"), []byte(cmd), 0o755); err != nil {
			return fmt.Errorf("ipmisim: %w", err)
		}
	}
	return nil
}

func shellQuote(v string) string { return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'" }

// ipmiQuote quotes a value for lan.conf, which takes "..." strings.
func ipmiQuote(v string) (string, error) {
	if strings.ContainsAny(v, "\"\\\n") {
		return "", fmt.Errorf("ipmisim: %q cannot be written in lan.conf", v)
	}
	return `"` + v + `"`, nil
}

func (s *Sim) writeConfig() error {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by drivers/ipmi/ipmisim\nname \"bmtest\"\nset_working_mc 0x20\n")
	fmt.Fprintf(&b, "  startlan 1\n    addr %s %d\n    priv_limit admin\n", s.Host, s.Port)
	for _, p := range []string{"callback", "user", "operator", "admin"} {
		fmt.Fprintf(&b, "    allowed_auths_%s none md2 md5 straight\n", p)
	}
	fmt.Fprintf(&b, "    guid a123456789abcdefa123456789abcdef\n  endlan\n")
	if s.opts.SerialKCS != "" {
		host, port, err := net.SplitHostPort(s.opts.SerialKCS)
		if err != nil {
			return fmt.Errorf("ipmisim: SerialKCS %q: %w", s.opts.SerialKCS, err)
		}
		fmt.Fprintf(&b, "  serial kcs %s %s codec VM\n", host, port)
	}
	if s.opts.SOL != "" {
		if _, _, err := net.SplitHostPort(s.opts.SOL); err != nil {
			return fmt.Errorf("ipmisim: SOL %q: %w", s.opts.SOL, err)
		}
		dev, err := ipmiQuote("tcp:" + s.opts.SOL)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "  sol %s 115200\n", dev)
	}
	script, err := ipmiQuote(s.path("chassis") + " 0x20")
	if err != nil {
		return err
	}
	fmt.Fprintf(&b, "  chassis_control %s\n", script)
	for i, u := range s.opts.Users {
		name, err := ipmiQuote(u.Name)
		if err != nil {
			return err
		}
		pw, err := ipmiQuote(u.Password)
		if err != nil {
			return err
		}
		priv := u.Priv
		if priv == "" {
			priv = "admin"
		}
		// At most 10 sessions per user, as a real BMC has a small limit:
		// a driver that leaks sessions fails here too.
		fmt.Fprintf(&b, "  user %d true %s %s %s 10 none md2 md5 straight\n", i+2, name, pw, priv)
	}
	if err := os.WriteFile(s.path("lan.conf"), []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("ipmisim: %w", err)
	}
	extra, err := s.opts.emu()
	if err != nil {
		return err
	}
	emu := "mc_setbmc 0x20\nmc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02\n" + extra + "mc_enable 0x20\n"
	if err := os.WriteFile(s.path("sim.emu"), []byte(emu), 0o600); err != nil {
		return fmt.Errorf("ipmisim: %w", err)
	}
	return nil
}

// start runs ipmi_sim and waits until it answers on its port.
func (s *Sim) start() error {
	logf, err := os.OpenFile(s.path("ipmi_sim.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("ipmisim: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command("ipmi_sim", "-n", "-c", s.path("lan.conf"), "-f", s.path("sim.emu"), "-s", s.path("state"))
	cmd.Stdout, cmd.Stderr = logf, logf
	// The simulator dies with the test binary, even when it is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("ipmisim: start ipmi_sim: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := waitReady(ctx, s.Addr(), done); err != nil {
		s.Kill()
		log, _ := os.ReadFile(s.path("ipmi_sim.log"))
		return fmt.Errorf("ipmisim: ipmi_sim on %s did not come up: %v; its log: %s", s.Addr(), err, bytes.TrimSpace(log))
	}
	return nil
}

// getChannelAuthCaps is a session-less IPMI 1.5 Get Channel Authentication
// Capabilities request (channel: this one, privilege: administrator), the
// first packet every IPMI client sends; any answer means ipmi_sim serves.
var getChannelAuthCaps = []byte{
	0x06, 0x00, 0xff, 0x07, // RMCP, class IPMI
	0x00, 0, 0, 0, 0, 0, 0, 0, 0, // auth type none, sequence, session id
	0x09,                   // message length
	0x20, 0x18, 0xc8, 0x81, // BMC, netfn app, checksum, remote console
	0x00, 0x38, 0x0e, 0x04, 0x35, // seq, command, channel, privilege, checksum
}

func waitReady(ctx context.Context, addr string, exited <-chan struct{}) error {
	c, err := net.Dial("udp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 512)
	for {
		select {
		case <-exited:
			return errors.New("ipmi_sim exited")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		_, _ = c.Write(getChannelAuthCaps)
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if n, err := c.Read(buf); err == nil && n > 0 {
			return nil
		}
	}
}

// Kill stops ipmi_sim at once, as a BMC losing power would; the chassis
// (its state, a running power-on command) stays as it is. Revive starts
// it again.
func (s *Sim) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.done = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Revive starts ipmi_sim again on the same port with the same state, as
// a BMC that comes back; sessions opened before are gone.
func (s *Sim) Revive() error {
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		return nil
	}
	return s.start()
}

// Restart is Kill then Revive: a BMC reboot between two calls.
func (s *Sim) Restart() error {
	s.Kill()
	return s.Revive()
}

// Close stops ipmi_sim and anything the power-on command started, and
// removes the folder. It is safe to call more than once.
func (s *Sim) Close() {
	s.Kill()
	if b, err := os.ReadFile(s.path("power-on.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	_ = os.RemoveAll(s.Dir)
}

// Chassis is the simulated machine's state as the script keeps it.
type Chassis struct {
	Power bool
	// Boot is ipmi_sim's name of the boot device: pxe, default (disk),
	// cdrom, bios or none.
	Boot string
}

// Chassis reads the chassis state straight from the script's file, not
// over IPMI.
func (s *Sim) Chassis() (Chassis, error) {
	b, err := os.ReadFile(s.path("chassis.state"))
	if errors.Is(err, os.ErrNotExist) {
		return Chassis{Boot: "default"}, nil
	}
	if err != nil {
		return Chassis{}, fmt.Errorf("ipmisim: %w", err)
	}
	var c Chassis
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "power":
			c.Power = v == "1"
		case "boot":
			c.Boot = v
		}
	}
	return c, nil
}

// SetChassis sets the chassis state directly, bypassing IPMI, to put a
// test's starting point in place. It does not run the power-on command.
func (s *Sim) SetChassis(c Chassis) error {
	p := "0"
	if c.Power {
		p = "1"
	}
	if c.Boot == "" {
		c.Boot = "default"
	}
	tmp := s.path("chassis.state.set")
	if err := os.WriteFile(tmp, []byte("power="+p+"\nboot="+c.Boot+"\n"), 0o600); err != nil {
		return fmt.Errorf("ipmisim: %w", err)
	}
	return os.Rename(tmp, s.path("chassis.state"))
}

// Events lists the chassis actions ipmi_sim asked of the script since the
// last ClearEvents, oldest first, as "power 1", "boot pxe", "reset 1",
// "shutdown 1".
func (s *Sim) Events() []string {
	b, _ := os.ReadFile(s.path("chassis.events"))
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// ClearEvents forgets the recorded chassis actions.
func (s *Sim) ClearEvents() { _ = os.Remove(s.path("chassis.events")) }

func (s *Sim) flag(name string, on bool) error {
	if !on {
		if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	return os.WriteFile(s.path(name), nil, 0o600)
}

// IgnoreSoftOff makes the simulated OS ignore (true) or obey (false, the
// default) a soft shutdown request.
func (s *Sim) IgnoreSoftOff(on bool) error { return s.flag("ignore-soft-off", on) }

// Stuck makes the chassis ignore every power request while the BMC keeps
// acknowledging them, as a machine with a failed power supply would.
func (s *Sim) Stuck(on bool) error { return s.flag("stuck", on) }

// Ipmitool runs Debian's ipmitool against the BMC as its first user, over
// lanplus with cipher suite 3: an independent client to check what a
// driver did. The password goes through the environment, not argv.
func (s *Sim) Ipmitool(args ...string) (string, error) {
	u := s.opts.Users[0]
	full := append([]string{"-I", "lanplus", "-C", "3", "-H", s.Host, "-p", strconv.Itoa(s.Port), "-U", u.Name, "-E", "-N", "1", "-R", "3"}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ipmitool", full...)
	cmd.Env = append(os.Environ(), "IPMI_PASSWORD="+u.Password)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ipmitool %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}
