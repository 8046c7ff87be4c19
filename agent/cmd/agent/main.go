// Command agent is the edge agent of one site (see 'agent --help').
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/agent/console"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/netbudget"
)

func main() {
	fs := flag.NewFlagSet("agent", flag.ExitOnError)
	fs.Usage = func() {
		fmt.Fprint(os.Stderr, `agent: the edge agent of one site. It connects to the coordinator's MQTT broker
with the site's credentials (from 'coordinator site add SITE --credentials-file FILE'),
runs out-of-band commands on the site's BMCs and relays results with a resending outbox.

It is the site's anchor. With --site-broker-listen ADDR it runs the site's own MQTT
broker on the site network: the ramdisks of the nodes it boots connect there (each
with its boot's own credential, to its own node's topics only) and never across
the WAN; the agent relays between that broker and the coordinator over its one
connection. Results of the ramdisks go into the agent's durable outbox and are
acknowledged to them at once; heartbeats cross the WAN as one summary per
--heartbeat-summary interval for the whole site (a heartbeat naming a new step goes
at once). Simulated nodes (--simulate) go through the same relay.

It drives the BMCs of the site's nodes of drivers ipmi (IPMI over LAN) and redfish.

Redfish nodes boot the ramdisk from virtual media, without DHCP: with --ramdisk-iso
(make ramdisk builds build/ramdisk/bmramdisk.iso) the agent serves the ISO over HTTP
on --media-listen, and for each boot a small image of that boot's parameters (node,
broker, a credential for this boot only, CA pin, driver_info kernel_append_params)
under a random name that is served only until the boot ends. The BMC gets both
(virtual CD and virtual USB stick), a one-time boot from the CD, and a power-on.
IPMI nodes boot the ramdisk by network boot: with --netboot-interface IFACE (the site
network), --netboot-kernel and --netboot-initrd (make ramdisk builds build/ramdisk/vmlinuz
and initramfs.cpio.zst) the agent serves DHCP there (leasing --netboot-dhcp-range, or
--netboot-dhcp-mode proxy beside the site's own DHCP server), TFTP of Debian's iPXE
binaries and HTTP of each boot's iPXE script, kernel and initramfs, answering only the
MACs of the nodes it is booting (docs/netboot.md).

With --simulate N it also serves N simulated nodes (driver fake): fake BMCs and
simulated ramdisk agents that speak the real protocol. With --qemu-kernel and
--qemu-initrd it runs nodes of the development driver qemu-dev as QEMU VMs booting
the real ramdisk.

Every result and power report waits in a durable outbox until the coordinator
acknowledges it: in Badger under --state-dir (default: FILE.state next to the
credentials file FILE), written and synced to disk before it is first sent, and
sent again after a restart (kill -9 included). The folder is private (0700, its
files 0600) and encrypted at rest with the key file outbox.key that the agent
creates there on first start: keep the two together, as the outbox cannot be
read without its key. --outbox-limit bounds the messages waiting for acks; at
the limit the agent logs it and runs no new BMC command until acks make room.

With --metrics-listen ADDR it serves its Prometheus metrics at http://ADDR/metrics
(BMC operations by driver, action and outcome with their latency, the outbox depth,
results resent, power-sync reads). Off by default. The metrics have no
authentication, so ADDR must be a loopback address (127.0.0.1:9101) unless
--metrics-listen-any is given too.

With --image-cache-dir DIR and --image-cache-listen ADDR the agent keeps a site image
cache: a deploy's write_image fetches its image from http://ADDR/images/TOKEN (a
name the agent makes for each image its commands name) instead of the origin.
The first request downloads the image once over the WAN while streaming it to
every node waiting for it; later ones are served from disk. The checksum
(image_checksum / os_hash) is verified before an image counts as cached: a
partial or mismatching download is never served complete and every waiting node
fails. --image-cache-size caps the folder (least recently used images go first).
'coordinator site cache SITE URL' pre-seeds it. Simulated nodes fetch through it too.

What the agent fetches on an operator's behalf (images, firmware images, config
drives) never comes from loopback (127.0.0.0/8, ::1), a link-local address
(169.254.0.0/16 with a cloud's metadata service, fe80::/10), an unspecified
address, the agent's own listeners or the site's BMCs (the addresses it knows and
--bmc-network CIDR): the address dialled is checked, after DNS and at every
redirect. --fetch-allow CIDR (repeatable) allows a network, e.g. 127.0.0.0/8 for an
image server on this host; the agent's own listeners stay refused. A config drive
must be an ISO 9660 or VFAT image (or its gzipped, base64 text) before a node gets it.

Plans: when the agent relays its site's ramdisks (site broker, or simulated nodes), the
coordinator may hand it the rest of a clean or deploy phase at once (run_plan): the agent
starts each step as soon as the one before it succeeded, without waiting for the
coordinator, so a phase goes on while the WAN is down; each result reaches the
coordinator as usual, which stays the authority (stop_plan stops a plan). A plan's
progress is kept in --state-dir and goes on after a restart. --plan-silence-bound D:
once the coordinator has not been heard for longer than D, no plan starts its next step
(the running one finishes) until it is heard again; 0 never holds a plan back.

Usage: agent --credentials-file FILE [--state-dir DIR] [--site NAME] [--broker-url URL] [--ca-file CA]
             [--site-broker-listen ADDR [--site-broker-url URL]]
             [--ramdisk-iso ISO --media-listen ADDR]
             [--simulate N] [--qemu-kernel K --qemu-initrd I --qemu-broker-url URL] [flags]

`)
		fs.PrintDefaults()
	}
	site := fs.String("site", "", "site name (default: from the credentials file)")
	brokerURL := fs.String("broker-url", "", "MQTT broker (default: from the credentials file)")
	credFile := fs.String("credentials-file", "", "credentials written by 'coordinator site add' (required)")
	stateDir := fs.String("state-dir", "", "folder of the durable outbox (Badger, encrypted at rest with DIR/outbox.key) (default: the credentials file's path with .state appended)")
	outboxLimit := fs.Int("outbox-limit", agent.DefaultOutboxLimit, "most results and power reports kept waiting for the coordinator's ack; at the limit no new BMC command runs until acks make room")
	caFile := fs.String("ca-file", "", "CA (PEM) that signs the broker's certificate, for an mqtts:// broker; the ramdisks this agent boots get its pin (bm.ca)")
	simulate := fs.Int("simulate", 0, "number of simulated nodes this site serves")
	stepDur := fs.Duration("step-duration", 2*time.Second, "how long each simulated in-band step takes")
	bootDelay := fs.Duration("boot-delay", time.Second, "how long a simulated ramdisk takes to boot")
	hb := fs.Duration("heartbeat", 5*time.Second, "simulated ramdisk heartbeat interval")
	bmcDelay := fs.Duration("bmc-delay", 50*time.Millisecond, "how long each simulated BMC action takes")
	failStep := fs.String("fail-step", "", "every simulated node fails this in-band step (failure injection)")
	dieStep := fs.String("die-step", "", "every simulated ramdisk dies during this step (failure injection)")
	noBoot := fs.Bool("no-boot", false, "simulated ramdisks never boot (failure injection)")
	simHealth := fs.Bool("simulate-health", false, "simulated BMCs tell their health, sensors (temperatures, fans, power supplies, voltages) and event log, read with power sync; "+
		"driver_info fake_fail_sensor=NAME fails one (e.g. \"Fan 2\"), fake_health=OK|Warning|Critical|none sets the system's (docs/remote-hands.md)")
	simUnknown := fs.Int("simulate-unknown", 0, "number of simulated machines at this site that belong to no node: when the site discovers (coordinator site set SITE --discovery on), they boot into discovery and report their inventories, and the coordinator enrolls them (docs/discovery.md)")
	simLLDP := fs.Bool("simulate-lldp", false, "each simulated NIC hears an LLDP frame of the site's simulated switch during inspection, so that the coordinator fills its port's local_link_connection (docs/discovery.md)")
	resend := fs.Duration("resend-interval", 5*time.Second, "how often unacknowledged results are sent again")
	healthEvery := fs.Duration("health-interval", 0, "how often the hardware's health, sensors and event log of the real BMCs that tell them (redfish, ipmi) are read, with the power reading (0: every power sync round)")
	consKeep := fs.Int("console-keep", console.DefaultKeep, fmt.Sprintf("bytes of each node's serial console output the agent keeps in its state folder while the console is enabled, also while the WAN is down (%d to %d; docs/console.md)", console.MinKeep, console.MaxKeep))
	consBW := fs.Int("console-bandwidth", console.DefaultBandwidth, fmt.Sprintf("bytes per second of console output the site sends to the coordinator, after results and reports (%d to %d)", console.MinBandwidth, console.MaxBandwidth))
	sensorEvery := fs.Duration("sensor-interval", 10*time.Minute, "how often sensor readings are sent to the coordinator when no sensor's status changed")
	powerSync := fs.Duration("power-sync-interval", 60*time.Second, "how often the power state of the site's real BMCs (ipmi, redfish, qemu-dev) is read; changes and failures are reported to the coordinator (0 disables)")
	qKernel := fs.String("qemu-kernel", "", "development driver qemu-dev: the ramdisk kernel its VMs boot (make ramdisk: build/ramdisk/vmlinux, uncompressed, boots fastest; vmlinuz works too)")
	qInitrd := fs.String("qemu-initrd", "", "development driver qemu-dev: the ramdisk initramfs")
	qBroker := fs.String("qemu-broker-url", "", "development driver qemu-dev: the broker as the VMs see it (e.g. mqtt://10.0.2.2:1883, or mqtts://10.0.2.2:1883 with --ca-file)")
	qCmdline := fs.String("qemu-cmdline", "", "development driver qemu-dev: extra kernel parameters (e.g. bm.ip=10.0.2.15/24 bm.gw=10.0.2.2)")
	rISO := fs.String("ramdisk-iso", "", "the ramdisk ISO that redfish nodes boot from virtual media (make ramdisk: build/ramdisk/bmramdisk.iso)")
	rListen := fs.String("media-listen", "", "address (host:port on the site network) where the BMCs fetch the ramdisk ISO and each boot's parameters")
	rURL := fs.String("media-url", "", "the media server as the BMCs reach it, when not http://MEDIA-LISTEN (e.g. behind NAT)")
	rBroker := fs.String("ramdisk-broker-url", "", "the MQTT broker as the nodes' ramdisks reach it (e.g. mqtts://10.1.0.1:8883 with --ca-file)")
	rParams := fs.String("ramdisk-params", "", "kernel-style parameters for every ramdisk boot of the site, e.g. 'bm.gw=10.1.0.1 bm.dns=10.1.0.1' (a node's driver_info kernel_append_params come after)")
	bmcConc := fs.Int("bmc-concurrency", 32, "BMC commands run at once across the site's BMCs; more wait their turn")
	metricsListen := fs.String("metrics-listen", "", "serve Prometheus metrics at http://ADDR/metrics (off by default); loopback only unless --metrics-listen-any")
	metricsAny := fs.Bool("metrics-listen-any", false, "allow --metrics-listen on a non-loopback address (the metrics have no authentication)")
	netboot := netbootFlags(fs)
	cache := imageCacheFlags(fs)
	siteBroker := siteBrokerFlags(fs)
	fdReserve := fs.Int("fd-reserve", netbudget.DefaultReserve, "file descriptors the listeners leave to the outbox store (Badger) and the rest of the process: all listeners together hold at most the NOFILE limit less this, and a connection accepted when fewer are left is closed at once")
	sbConns := connBudgetFlags(fs, "site-broker", "the site broker", mqttbroker.DefaultConnLimits, "whole CONNECT")
	mediaConns := connBudgetFlags(fs, "media", "the media server", agent.DefaultMediaConns, "first request header")
	cacheConns := connBudgetFlags(fs, "image-cache", "the image cache", agent.DefaultImageCacheConns, "first request header")
	nbConns := connBudgetFlags(fs, "netboot-http", "the network-boot HTTP server", agent.DefaultNetbootHTTPConns, "first request header")
	metricsConns := connBudgetFlags(fs, "metrics", "the metrics listener", agent.DefaultMetricsConns, "first request header")
	planSilence := fs.Duration("plan-silence-bound", agent.DefaultPlanSilenceBound, "once the coordinator has not been heard (the agent's link is down) for longer than this, a plan starts no next step until it is heard again; the running step finishes (0: never hold a plan back)")
	verbose := fs.Bool("v", false, "debug logging")
	_ = fs.Parse(os.Args[1:])
	if err := console.CheckConfig(*consKeep, *consBW); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(2)
	}
	sb, summary, sbErr := siteBroker()
	sb.Conns = sbConns()
	if sbErr != "" {
		fmt.Fprintln(os.Stderr, "error: "+sbErr)
		os.Exit(2)
	}
	if msg := checkConnBudgets(fs); msg != "" {
		fmt.Fprintln(os.Stderr, "error: "+msg)
		os.Exit(2)
	}
	if err := netbudget.SetDefaultReserve(*fdReserve); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if *credFile == "" {
		fmt.Fprintln(os.Stderr, "error: --credentials-file is required; create one with 'coordinator site add SITE --credentials-file FILE'")
		os.Exit(2)
	}
	creds, err := agent.LoadCredentials(*credFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(2)
	}
	if *site == "" {
		*site = creds.Site
	}
	if *stateDir == "" {
		*stateDir = *credFile + ".state"
	}
	if *site != creds.Site {
		fmt.Fprintf(os.Stderr, "error: --site %s does not match the credentials file's site %s\n", *site, creds.Site)
		os.Exit(2)
	}
	if *brokerURL == "" {
		*brokerURL = creds.BrokerURL
	}
	if (*qKernel == "") != (*qInitrd == "") {
		fmt.Fprintln(os.Stderr, "error: qemu-dev needs both --qemu-kernel and --qemu-initrd (make ramdisk builds them under build/ramdisk)")
		os.Exit(2)
	}
	nb := netboot()
	nb.HTTPConns = nbConns()
	cacheOpts, err := cache()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error: "+err.Error())
		os.Exit(2)
	}
	cacheOpts.Conns = cacheConns()
	if msg := ramdiskFlagsError(*rISO, *rListen, *rURL, *rBroker, *rParams, nb.Interface != ""); msg != "" {
		fmt.Fprintln(os.Stderr, "error: "+msg)
		os.Exit(2)
	}
	if *planSilence < 0 {
		fmt.Fprintln(os.Stderr, "error: --plan-silence-bound must be 0 (never hold a plan back) or a positive duration such as 24h")
		os.Exit(2)
	}
	if *metricsAny && *metricsListen == "" {
		fmt.Fprintln(os.Stderr, "error: --metrics-listen-any goes with --metrics-listen ADDR")
		os.Exit(2)
	}
	if *rISO != "" && (*rListen == "" || (*rBroker == "" && sb.Listen == "")) {
		fmt.Fprintln(os.Stderr, "error: --ramdisk-iso needs --media-listen (where the BMCs fetch it) and --site-broker-listen (the site broker the ramdisks use) or --ramdisk-broker-url (another broker they reach)")
		os.Exit(2)
	}
	if *rBroker != "" && sb.Listen != "" {
		fmt.Fprintln(os.Stderr, "error: --ramdisk-broker-url and --site-broker-listen both name the ramdisks' broker; with a site broker, --site-broker-url says how the ramdisks reach it")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := agent.New(agent.Config{Site: *site, BrokerURL: *brokerURL, Username: creds.Username, Password: creds.Password, CAFile: *caFile,
		ResendInterval: *resend, PowerSyncInterval: *powerSync, HealthInterval: *healthEvery, ConsoleKeep: *consKeep, ConsoleBandwidth: *consBW, SensorInterval: *sensorEvery, PlanSilenceBound: *planSilence, BMCConcurrency: *bmcConc, Log: log,
		MetricsListen: *metricsListen, MetricsListenAny: *metricsAny, MetricsConns: metricsConns(), StateDir: *stateDir, OutboxLimit: *outboxLimit,
		QEMU:       agent.QEMUOptions{Kernel: *qKernel, Initrd: *qInitrd, BrokerURL: *qBroker, Cmdline: *qCmdline},
		Ramdisk:    agent.RamdiskOptions{ISO: *rISO, Listen: *rListen, URL: *rURL, BrokerURL: *rBroker, Params: *rParams, Conns: mediaConns()},
		Netboot:    nb,
		Cache:      cacheOpts,
		SiteBroker: sb, HeartbeatSummary: summary,
		Sim: agent.SimOptions{Nodes: *simulate, StepDuration: *stepDur, BootDelay: *bootDelay, Heartbeat: *hb, BMCDelay: *bmcDelay,
			FailStep: *failStep, DieStep: *dieStep, NoBoot: *noBoot, LLDP: *simLLDP, Health: *simHealth, Unknown: *simUnknown}})
	log.Info("edge agent starting", "site", *site, "broker", *brokerURL, "simulated_nodes", *simulate, "state_dir", *stateDir)
	if err := a.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// ramdiskFlagsError says what is wrong with the flags of the ramdisk boots
// ("" when nothing): the media server's flags go with the ISO; the
// ramdisks' broker and parameters with either way of booting them.
func ramdiskFlagsError(iso, mediaListen, mediaURL, broker, params string, netboot bool) string {
	if iso == "" && (mediaListen != "" || mediaURL != "") {
		return "--media-listen and --media-url go with --ramdisk-iso (make ramdisk builds build/ramdisk/bmramdisk.iso)"
	}
	if iso == "" && !netboot && (broker != "" || params != "") {
		return "--ramdisk-broker-url and --ramdisk-params are for the ramdisks this agent boots: they go with --ramdisk-iso (virtual media) or --netboot-interface (network boot)"
	}
	return ""
}
