// Command bmramdisk is the in-band agent of the bare-metal ramdisk. It
// runs as the uinit of a u-root initramfs: it reads its bm.* parameters
// from the kernel command line, loads the drivers for the hardware (and
// without bm.node on the command line reads its parameters from a boot
// parameters medium, lib/bootmedia), waits for randomness, brings
// the network up and reports that it is ready.
// Then it connects to the site's broker with the node's credentials and
// runs the protocol (lib/session) with the local step runner
// (ramdisk/steps) until the coordinator powers the node off. It is
// crash-only: on any unrecoverable error it logs the error and reboots
// (with bm.debug it returns to u-root's shell instead).
package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"maps"
	neturl "net/url"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/lib/mqttlink"
	"github.com/bmedge/bmedge/lib/session"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/ramdisk/bmcaddr"
	"github.com/bmedge/bmedge/ramdisk/boot"
	"github.com/bmedge/bmedge/ramdisk/disk"
	"github.com/bmedge/bmedge/ramdisk/inventory"
	"github.com/bmedge/bmedge/ramdisk/rescue"
	"github.com/bmedge/bmedge/ramdisk/steps"
)

var logger = boot.NewLogger(os.Stdout, "bmramdisk: ")

func main() {
	ctx := context.Background()
	p, err := params(ctx)
	if err != nil {
		fatal(p, err)
	}
	if err := run(ctx, p); err != nil {
		fatal(p, err)
	}
	if p.Mode == boot.ModeDiscovery && p.Broker != "" {
		if err := discover(ctx, p); err != nil {
			fatal(p, err)
		}
		if err := boot.PowerOff(); err != nil {
			fatal(p, err)
		}
		return
	}
	if p.Broker == "" {
		logger.Printf("no bm.broker: nothing to serve; powering off")
		if err := boot.PowerOff(); err != nil {
			fatal(p, err)
		}
		return
	}
	if err := serve(context.Background(), p); err != nil {
		fatal(p, err)
	}
}

// serve runs the protocol until the session ends (it only ends by error:
// the coordinator ends a boot by powering the node off).
func serve(ctx context.Context, p boot.Params) error {
	url := p.Broker
	if !strings.Contains(url, "://") {
		url = "mqtt://" + url
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	rescueStart, rescueRefused := rescueLogin(log)
	runner := &steps.Runner{Log: log, Rescue: rescueStart}
	var (
		link *mqttlink.Link
		err  error
	)
	lt := &linkTransport{}
	s := session.New(session.Config{Site: p.Site, Node: p.Node, Heartbeat: 5 * time.Second, Runner: runner,
		Transport: lt, Log: log, RescueRefused: rescueRefused})
	var tc *tls.Config
	if p.CAPin != "" {
		u, perr := neturl.Parse(url)
		if perr != nil {
			return fmt.Errorf("bm.broker=%q: %w", p.Broker, perr)
		}
		if tc, err = mqttlink.TLSFromPin(p.CAPin, u.Hostname()); err != nil {
			return err
		}
	}
	// A new boot starts a new session (CleanStart): nothing of an earlier
	// boot's is worth resuming, and its credential is dead anyway.
	link, err = mqttlink.Dial(ctx, mqttlink.Config{URL: url, ClientID: "ramdisk-" + p.Node, Username: p.User, Password: p.Password,
		TLS: tc, CleanStart: true,
		Subscriptions: []string{protocol.NodeCmdTopic(p.Site, p.Node)},
		Handler: func(topic string, payload []byte) {
			m, err := protocol.Decode(payload)
			if err != nil {
				logger.Printf("message rejected on %s: %v", topic, err)
				return
			}
			s.Deliver(m)
		},
		KeepAlive: 10, Logger: log})
	if err != nil {
		return err
	}
	lt.l = link
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = link.AwaitUp(wctx)
	cancel()
	if err != nil {
		return fmt.Errorf("broker %s: %w", url, err)
	}
	logger.Printf("connected to %s as %s; boot %s", url, p.User, s.BootID())
	s.Run(ctx)
	return fmt.Errorf("session ended")
}

type linkTransport struct{ l *mqttlink.Link }

func (t *linkTransport) Publish(ctx context.Context, topic string, payload []byte) error {
	return t.l.Publish(ctx, topic, payload, false)
}

// params reads the boot's parameters and loads the kernel modules. With
// bm.node on the kernel command line the parameters are there. Without
// it (the generic ramdisk ISO booted from virtual media) they are on a
// boot parameters medium (lib/bootmedia), a second virtual CD or USB
// stick that appears once its controller's modules are loaded: the
// command line followed by the medium's text, which wins. The medium is
// marked so that no step ever writes to it.
func params(ctx context.Context) (boot.Params, error) {
	cmdline, err := boot.ReadCmdlineText()
	if err != nil {
		return boot.Params{}, err
	}
	p, err := boot.ParseCmdline(cmdline)
	if boot.CmdlineHasNode(cmdline) {
		if err != nil {
			return p, err
		}
		logger.Printf("starting, pid %d, parameters: %s", os.Getpid(), p)
		return p, loadModules(ctx, false)
	}
	// p has what the command line says (bm.debug, for fatal).
	given := p.String()
	if given == "" {
		given = "none"
	}
	logger.Printf("starting, pid %d, kernel command line parameters: %s", os.Getpid(), given)
	if err := loadModules(ctx, false); err != nil {
		return p, err
	}
	m, err := boot.FindParamsMedium(ctx, boot.MediaOptions{
		// USB devices (a BMC's virtual media) enumerate late: load
		// the modules of new devices before every scan.
		Rescan: func(ctx context.Context) { _ = loadModules(ctx, true) },
	}, logger.Printf)
	if err != nil {
		return p, err
	}
	disk.MarkParamsMedium(m.DevNo)
	mp, err := boot.MergeParams(cmdline, m.Text)
	if err != nil {
		return p, fmt.Errorf("parameters from the kernel command line and %s: %w", m.Path, err)
	}
	logger.Printf("parameters (kernel command line, then %s): %s", m.Path, mp)
	return mp, nil
}

// triedModules are the modules loadModules tried, loaded or failed.
var triedModules = map[string]bool{}

// loadModules loads the modules the hardware asks for; quiet leaves out
// the summary when nothing new loaded (rescans while waiting for media).
func loadModules(ctx context.Context, quiet bool) error {
	rep, err := boot.LoadModules(ctx, boot.ModuleOptions{Tried: triedModules}, logger.Printf)
	if err != nil {
		return fmt.Errorf("load kernel modules: %w", err)
	}
	if !quiet || len(rep.Loaded)+len(rep.Failed) > 0 {
		logger.Printf("modules: %d loaded, %d failed, %d passes", len(rep.Loaded), len(rep.Failed), rep.Passes)
	}
	return nil
}

func run(ctx context.Context, p boot.Params) error {
	bootMode()
	bmcaddr.LoadModules()
	if _, err := boot.WaitRandom(logger.Printf); err != nil {
		return err
	}

	nctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	ni, err := boot.NetworkUp(nctx, p.Net, boot.NetOptions{}, logger.Printf)
	if err != nil {
		return fmt.Errorf("network: %w", err)
	}
	logger.Printf("ready node=%s ip=%s iface=%s mac=%s", p.Node, ni.Addr, ni.Iface, ni.MAC)
	nodeAddr = ni.Addr.Addr().String()
	return nil
}

// bootMode mounts the UEFI variables (read-only) and logs how the node
// booted: the inventory reports the same (boot.current_boot_mode,
// boot.secure_boot).
func bootMode() {
	uefi, err := boot.MountEFIVars()
	switch {
	case !uefi:
		logger.Printf("boot mode bios")
	case err != nil:
		logger.Printf("boot mode uefi; Secure Boot unknown: %v", err)
	default:
		on, err := inventory.ReadSecureBoot("/")
		switch {
		case err != nil:
			logger.Printf("boot mode uefi; Secure Boot unknown: %v", err)
		case on:
			logger.Printf("boot mode uefi; Secure Boot on")
		default:
			logger.Printf("boot mode uefi; Secure Boot off")
		}
	}
}

// nodeAddr is the node's address on the site network, for the rescue login.
var nodeAddr string

// rescueLogin is finalize_rescue's login (ramdisk/rescue): an SSH server on
// port 22 and a prompt on the serial console, for the user rescue with the
// password whose hash the coordinator sent. A resent finalize_rescue with
// the same hash keeps the running login; another hash replaces it.
// refused counts what the logins of this boot refused, by kind, for the
// heartbeats (a replaced login's refusals stay counted).
func rescueLogin(log *slog.Logger) (start func(hash string) (map[string]any, error), refused func() map[string]int64) {
	var (
		mu     sync.Mutex
		srv    *rescue.Server
		cur    string
		cancel context.CancelFunc
		// before are the refusals of the logins replaced.
		before = map[string]int64{}
	)
	refused = func() map[string]int64 {
		mu.Lock()
		defer mu.Unlock()
		out := maps.Clone(before)
		if srv != nil {
			for k, n := range srv.Stats() {
				out[k] += n
			}
		}
		return out
	}
	start = func(hash string) (map[string]any, error) {
		mu.Lock()
		defer mu.Unlock()
		if srv == nil || hash != cur {
			if srv != nil {
				cancel()
				srv.Close()
				for k, n := range srv.Stats() {
					before[k] += n
				}
				srv = nil
			}
			s, err := rescue.Start(rescue.Config{Hash: hash, Listen: ":22", Log: log})
			if err != nil {
				return nil, fmt.Errorf("rescue login: %w", err)
			}
			var ctx context.Context
			ctx, cancel = context.WithCancel(context.Background())
			srv, cur = s, hash
			cmdline, _ := boot.ReadCmdlineText()
			tty := rescue.ConsoleDevice(cmdline)
			go func() {
				if err := s.Console(ctx, tty); err != nil && ctx.Err() == nil {
					logger.Printf("rescue login on %s: %v", tty, err)
				}
			}()
			logger.Printf("rescue: SSH for user %s on %s port 22 (host key %s) and on the console %s", rescue.User, nodeAddr, ssh.FingerprintSHA256(s.HostKey()), tty)
		}
		fp := ssh.FingerprintSHA256(srv.HostKey())
		// The summary goes into the node's history: the operator checks
		// the host key of the first login against it.
		return map[string]any{"summary": fmt.Sprintf("rescue login: ssh %s@%s (port 22, host key %s) or the serial console", rescue.User, nodeAddr, fp),
			"ssh_host_key_fingerprint": fp}, nil
	}
	return start, refused
}

// fatal is the crash-only exit: log, then reboot so that the node comes
// back through PXE in a clean state.
func fatal(p boot.Params, err error) {
	logger.Printf("FATAL: %v", err)
	if p.Debug {
		logger.Printf("bm.debug is set: not rebooting; exiting to the shell")
		os.Exit(1)
	}
	logger.Printf("rebooting in 5s")
	time.Sleep(5 * time.Second)
	if err := boot.Reboot(); err != nil {
		logger.Printf("reboot: %v", err)
	}
	os.Exit(1)
}
