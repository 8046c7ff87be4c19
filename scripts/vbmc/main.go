// Command vbmc serves virtual Redfish BMCs (drivers/redfish/vbmc) for labs
// and benchmarks: in-memory systems, or one QEMU VM driven over QMP. It is
// never for production: users and sessions live in memory.
//
//	VBMC_PASSWORD=secret go run ./scripts/vbmc --systems 2
//	go run ./scripts/vbmc --password secret --qemu-disk disk.img --boot-mode Legacy
//
// `go run ./scripts/vbmc --help` says everything.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.As(err, new(usageError)):
		fmt.Fprintf(os.Stderr, "vbmc: %v (see --help)\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "vbmc: %v\n", err)
		os.Exit(1)
	}
}

// usageError is a wrong command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

const usageText = `vbmc serves virtual Redfish BMCs for labs and benchmarks (drivers/redfish/vbmc),
never for production: its users and sessions live in memory.

Usage:
  go run ./scripts/vbmc [flags]                  one in-memory system
  go run ./scripts/vbmc --systems N [flags]      N in-memory systems behind one BMC
  go run ./scripts/vbmc --qemu-disk PATH [flags] one QEMU VM behind the BMC

A BMC needs a password: --password, or the environment variable VBMC_PASSWORD
(better: a flag is visible to every user in ps). The user is --username (admin).

When it is ready it prints one line with its URL and the system IDs, e.g.

  vbmc: serving https://127.0.0.1:8000 systems: 1

and it serves until SIGINT (Ctrl-C) or SIGTERM; a QEMU VM is powered off then.

In-memory systems (--systems N) only remember power, boot override, BIOS and
virtual media: for benchmarks and tests of the Redfish path. With one system its
ID is "1"; with several, "system-1" … "system-N", each with its own manager
("BMC-system-1" …), as sushy-tools' emulator does.

QEMU mode (--qemu-disk) runs one VM with the raw disk image PATH when the system
is powered on (user-mode networking, no listener but the QMP socket in --dir):
power actions start, reset or quit QEMU; the virtual CD and USB stick are
images the BMC fetches over HTTP(S) into --dir; UEFI boots OVMF (Debian
package ovmf), Legacy boots SeaBIOS. Without --dir a temporary folder is used
and removed at exit, console log included: give --dir or --console to keep it.

A node of the coordinator behind this BMC (coordinator node create, or the API):

  driver redfish, driver_info:
    redfish_address    the URL printed at start (https with --tls-cert/--tls-key)
    redfish_username   admin (--username)
    redfish_password   the password
    redfish_system_id  the system's ID, needed when the BMC has several
    redfish_verify_ca  the CA file that signed --tls-cert (or false, for a lab)

A lab certificate: bin/coordinator certs --dir DIR makes a CA and a server
certificate valid for localhost and 127.0.0.1 (--host for other names):
--tls-cert DIR/server.pem --tls-key DIR/server-key.pem; DIR/ca.pem is the CA
for redfish_verify_ca.

Fault injection (for the driver's retries and timeouts): --session-limit (a
BMC refuses one session more with 503 SessionLimitExceeded), --power-delay (a
reset is accepted at once and shows in PowerState only later), --latency
(every answer is late), --fail-status/--fail-count (answer the next requests
with a 5xx), --reset-downtime (503 for a while after a Manager.Reset).

Flags:
`

// options are the parsed flags.
type options struct {
	listen, certFile, keyFile string
	username, password        string
	systems                   int
	name                      string
	bootMode                  string
	cpus, memoryGiB           int
	fetchMedia                bool

	qemuDisk, qemuDiskSerial string
	qemuBinary, ovmf         string
	qemuCPUs, memoryMB       int
	console, dir             string
	netdev, mac              string

	sessionLimit   int
	sessionTimeout time.Duration
	powerDelay     time.Duration
	latency        time.Duration
	failStatus     int
	failCount      int
	resetDowntime  time.Duration
	logLevel       string
}

func parse(args []string, stdout io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("vbmc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8000", "address to listen on (port 0: any free port, printed at start)")
	fs.StringVar(&o.certFile, "tls-cert", "", "PEM certificate (chain) to serve HTTPS with; needs --tls-key (default: plain HTTP)")
	fs.StringVar(&o.keyFile, "tls-key", "", "PEM private key of --tls-cert")
	fs.StringVar(&o.username, "username", "admin", "the BMC's one user")
	fs.StringVar(&o.password, "password", "", "the user's password (default: $VBMC_PASSWORD; one of them is required)")
	fs.IntVar(&o.systems, "systems", 0, "in-memory systems behind the BMC (default 1 without --qemu-disk)")
	fs.StringVar(&o.name, "name", "", "the service root's Name (default \"bmedge virtual BMC\")")
	fs.StringVar(&o.bootMode, "boot-mode", vbmc.ModeUEFI, "initial boot mode of every system: UEFI or Legacy")
	fs.IntVar(&o.cpus, "report-cpus", 0, "CPUs reported in each system's ProcessorSummary (default 2)")
	fs.IntVar(&o.memoryGiB, "report-memory-gib", 0, "memory reported in each system's MemorySummary (default 4)")
	fs.BoolVar(&o.fetchMedia, "fetch-media", false, "in-memory systems download inserted virtual media (and fail the insert when they cannot), as a real BMC would")

	fs.StringVar(&o.qemuDisk, "qemu-disk", "", "QEMU mode: the VM's raw disk image")
	fs.StringVar(&o.qemuDiskSerial, "qemu-disk-serial", "", "QEMU mode: the disk's serial number")
	fs.IntVar(&o.memoryMB, "memory-mb", 1024, "QEMU mode: the VM's memory in MiB")
	fs.IntVar(&o.qemuCPUs, "cpus", 1, "QEMU mode: the VM's CPUs")
	fs.StringVar(&o.console, "console", "", "QEMU mode: file that receives the serial console (default DIR/console.log)")
	fs.StringVar(&o.dir, "dir", "", "QEMU mode: folder for the QMP socket, the media cache and qemu.log; a short path (default: a temporary folder, removed at exit)")
	fs.StringVar(&o.qemuBinary, "qemu-binary", "qemu-system-x86_64", "QEMU mode: the emulator")
	fs.StringVar(&o.ovmf, "ovmf", "/usr/share/ovmf/OVMF.fd", "QEMU mode: UEFI firmware for --boot-mode UEFI")
	fs.StringVar(&o.netdev, "netdev", "user,id=n0", "QEMU mode: -netdev value (must keep id=n0), e.g. user,id=n0,bootfile=http://10.0.2.2:8080/boot.ipxe")
	fs.StringVar(&o.mac, "mac", "", "QEMU mode: the NIC's MAC address (default: QEMU's)")

	fs.IntVar(&o.sessionLimit, "session-limit", 4, "sessions open at once; one more is refused with 503 SessionLimitExceeded")
	fs.DurationVar(&o.sessionTimeout, "session-timeout", 30*time.Minute, "a session unused this long is closed")
	fs.DurationVar(&o.powerDelay, "power-delay", 0, "fault: a reset is accepted at once but happens (and shows in PowerState) this much later")
	fs.DurationVar(&o.latency, "latency", 0, "fault: delay every answer by this much")
	fs.IntVar(&o.failStatus, "fail-status", 0, "fault: answer requests with this 5xx status (see --fail-count)")
	fs.IntVar(&o.failCount, "fail-count", 0, "fault: how many requests get --fail-status (negative: all)")
	fs.DurationVar(&o.resetDowntime, "reset-downtime", 0, "fault: after a Manager.Reset the BMC answers 503 for this long")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug (every request), info (power, boot, media, BIOS), warn or error")

	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usageText)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil, err
		}
		return nil, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if o.password == "" {
		o.password = os.Getenv("VBMC_PASSWORD")
	}
	if o.password == "" {
		return nil, usageError{"no password: give --password or set VBMC_PASSWORD (a BMC without a password is refused)"}
	}
	if o.username == "" {
		return nil, usageError{"--username must not be empty"}
	}
	if (o.certFile == "") != (o.keyFile == "") {
		return nil, usageError{"--tls-cert and --tls-key go together"}
	}
	if o.bootMode != vbmc.ModeUEFI && o.bootMode != vbmc.ModeLegacy {
		return nil, usageError{fmt.Sprintf("--boot-mode %q: want UEFI or Legacy", o.bootMode)}
	}
	if o.qemuDisk != "" {
		if set["systems"] && o.systems != 1 {
			return nil, usageError{"--qemu-disk runs one VM: --systems must be 1 or absent"}
		}
		o.systems = 1
		if o.memoryMB < 64 || o.qemuCPUs < 1 {
			return nil, usageError{"--memory-mb must be at least 64 and --cpus at least 1"}
		}
	} else {
		for _, f := range []string{"qemu-disk-serial", "memory-mb", "cpus", "console", "dir", "qemu-binary", "ovmf", "netdev", "mac"} {
			if set[f] {
				return nil, usageError{fmt.Sprintf("--%s is for QEMU mode; give --qemu-disk too", f)}
			}
		}
		if !set["systems"] {
			o.systems = 1
		}
		if o.systems < 1 || o.systems > 100000 {
			return nil, usageError{fmt.Sprintf("--systems %d: want 1 to 100000", o.systems)}
		}
	}
	if o.failStatus != 0 && (o.failStatus < 500 || o.failStatus > 599) {
		return nil, usageError{fmt.Sprintf("--fail-status %d: want a 5xx status", o.failStatus)}
	}
	if o.failCount != 0 && o.failStatus == 0 {
		return nil, usageError{"--fail-count needs --fail-status"}
	}
	if o.failStatus != 0 && o.failCount == 0 {
		o.failCount = -1
	}
	if o.sessionLimit < 1 {
		return nil, usageError{"--session-limit must be at least 1"}
	}
	for name, d := range map[string]time.Duration{"power-delay": o.powerDelay, "latency": o.latency, "reset-downtime": o.resetDowntime, "session-timeout": o.sessionTimeout} {
		if d < 0 {
			return nil, usageError{fmt.Sprintf("--%s must not be negative", name)}
		}
	}
	return o, nil
}

func logLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, usageError{fmt.Sprintf("--log-level %q: want debug, info, warn or error", s)}
	}
	return l, nil
}

// syncWriter lets the logger and the ready line share stdout.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// run serves the BMC that args describe until ctx ends. It writes the
// ready line and the log to stdout; flag.ErrHelp means --help was asked
// (the usage is on stdout).
func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parse(args, stdout)
	if err != nil {
		return err
	}
	level, err := logLevel(o.logLevel)
	if err != nil {
		return err
	}
	out := &syncWriter{w: stdout}
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: level}))

	var systems []vbmc.SystemConfig
	var qm *vbmc.QEMUMachine
	if o.qemuDisk != "" {
		if _, err := os.Stat(o.qemuDisk); err != nil {
			return fmt.Errorf("--qemu-disk: %w", err)
		}
		dir := o.dir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "vbmc-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		qm, err = vbmc.NewQEMUMachine(vbmc.QEMUConfig{QEMU: o.qemuBinary, Dir: dir, Disk: o.qemuDisk, DiskSerial: o.qemuDiskSerial,
			MemoryMB: o.memoryMB, CPUs: o.qemuCPUs, Console: o.console, OVMF: o.ovmf, Netdev: o.netdev, MAC: o.mac, Logger: log})
		if err != nil {
			return err
		}
		// Powered off at every exit, also when the BMC does not come up.
		defer func() {
			qm.Close()
			log.Info("QEMU VM powered off")
		}()
		console := o.console
		if console == "" {
			console = filepath.Join(dir, "console.log")
		}
		log.Info("QEMU machine (starts at power on)", "disk", o.qemuDisk, "memory_mb", o.memoryMB, "cpus", o.qemuCPUs,
			"dir", dir, "console", console, "qemu_log", filepath.Join(dir, "qemu.log"))
		systems = append(systems, vbmc.SystemConfig{Machine: qm, BootMode: o.bootMode, CPUs: o.qemuCPUs, MemoryGiB: max(1, o.memoryMB/1024)})
	} else {
		for range o.systems {
			systems = append(systems, vbmc.SystemConfig{Machine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{FetchMedia: o.fetchMedia}),
				BootMode: o.bootMode, CPUs: o.cpus, MemoryGiB: o.memoryGiB})
		}
	}

	b, err := vbmc.New(vbmc.Config{Username: o.username, Password: o.password, Systems: systems, SessionLimit: o.sessionLimit,
		SessionTimeout: o.sessionTimeout, ResetDowntime: o.resetDowntime, Name: o.name, Logger: log})
	if err != nil {
		return err
	}
	// Stops delayed power actions first, then (deferred above) the VM.
	defer b.Close()
	b.SetFaults(vbmc.Faults{Latency: o.latency, FailStatus: o.failStatus, FailCount: o.failCount, PowerDelay: o.powerDelay})

	var h http.Handler = b
	if level <= slog.LevelDebug {
		h = requestLog(b, log)
	}
	srv, err := vbmc.Serve(h, vbmc.ServeOptions{Addr: o.listen, CertFile: o.certFile, KeyFile: o.keyFile})
	if err != nil {
		return err
	}
	defer srv.Close()

	ids := b.SystemIDs()
	fmt.Fprintf(out, "vbmc: serving %s systems: %s\n", srv.URL, strings.Join(ids, ","))
	<-ctx.Done()
	log.Info("stopping")
	return nil
}

// requestLog logs every request at debug level: method, path, status,
// duration (never a header: they carry passwords and session tokens).
func requestLog(h http.Handler, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sw, r)
		log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.status, "took", time.Since(start).Round(time.Microsecond), "remote", r.RemoteAddr)
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}
