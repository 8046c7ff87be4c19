package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/coordinator/cluster"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/inspectrules"
	"github.com/bmedge/bmedge/coordinator/server"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/lib/netbudget"
	"github.com/bmedge/bmedge/protocol"
	"github.com/spf13/cobra"
)

const serveLong = `Runs the coordinator: the HTTP API, the state machine, the Badger store and (unless
` + "`--broker-url`" + `) the embedded MQTT broker, until SIGINT or SIGTERM.

API security. The API works like Ironic standalone's: with ` + "`--auth http_basic`" + ` every
request needs HTTP Basic credentials of the htpasswd file, except ` + "`GET /`" + ` and ` + "`GET /v1`" + `,
the version documents that clients read first (Ironic leaves them public too). A
missing or wrong login is 401 with ` + "`WWW-Authenticate: Basic realm=\"bmedge\"`" + ` and Ironic's
error body; the log names the user only when it exists, never a password. serve refuses
` + "`--auth none`" + ` on any address but loopback (127.0.0.0/8, ::1, localhost), before it opens
anything. ` + "`--tls-cert`" + ` and ` + "`--tls-key`" + ` serve the API over https (TLS 1.2 or newer; the log
line then says https://) and the embedded broker over mqtts.

Requests are bounded, each refused in Ironic's error shape: a body of POST, PUT or PATCH
must be ` + "`application/json`" + ` (with charset=utf-8 or none; PATCH also takes
` + "`application/json-patch+json`" + `), anything else is 415, which is what stops a browser's
cross-site form post; a body over 1 MiB or nested deeper than 32 levels is 400; each of
driver_info, properties, instance_info and extra is at most 64 KiB as JSON,
conductor_group 255 bytes, maintenance and retirement reasons 4096; larger is 400 naming
the field. Node names follow Ironic's rules (API 1.10 and later): only letters, digits
and -._~, at most 255, not UUID-like, not one of maintenance, management, ports, states,
vendor_passthru, validate, detail, and not empty; the same on PATCH /name.`

const serveExample = `  # make run's coordinator: loopback, no authentication
  coordinator serve --data-dir build/run/data

  # beyond loopback: http_basic and TLS
  htpasswd -cB -C 12 /etc/bmedge/htpasswd operator
  coordinator certs --dir /etc/bmedge/pki --host coord.example.net --host 192.0.2.10
  coordinator serve --api-listen 0.0.0.0:6385 --auth http_basic --htpasswd /etc/bmedge/htpasswd \
      --tls-cert /etc/bmedge/pki/server.pem --tls-key /etc/bmedge/pki/server-key.pem
  export OS_USERNAME=operator OS_PASSWORD=... OS_CACERT=/etc/bmedge/pki/ca.pem
  coordinator --url https://coord.example.net:6385 node list
  OS_AUTH_TYPE=http_basic OS_ENDPOINT=https://coord.example.net:6385 baremetal node list`

// serveOptions are serve's flags.
type serveOptions struct {
	dataDir, apiListen, mqttListen                              string
	brokerURL, brokerCA, brokerUser, brokerPW                   string
	advertise, auth, htpasswd, tlsCert, tlsKey, inspectionRules string
	defaultSite, quarantineOn                                   string
	maxPacket, maxClean, maxDeploy, histMax                     int
	waitTimeout, cmdTimeout, resend, tick                       time.Duration
	autoClean, forcePower, verbose                              bool
	fastTrack                                                   bool
	allowMD5                                                    bool
	edgePlans                                                   bool
	fastTrackTimeout                                            time.Duration
	prio                                                        kv
	mqttInsecure                                                bool
	fdReserve                                                   int
	apiConns, mqttConns                                         netbudget.Limits
	clusterMember, clusterListen, clusterPeers                  string
	clusterBrokerURL                                            string
	clusterCert, clusterCertKey, clusterCA                      string
}

func (c *cmd) serveCmd() *cobra.Command {
	o := &serveOptions{prio: kv{}}
	cc := &cobra.Command{
		Use:     "serve",
		Short:   "Run the coordinator: API, state machine, store and embedded MQTT broker",
		Long:    serveLong + serveExitHelp,
		Example: serveExample,
		Args:    args(),
		RunE:    func(cc *cobra.Command, _ []string) error { return c.serve(cc, o) },
	}
	fs := cc.Flags()
	fs.SortFlags = false
	fs.StringVar(&o.dataDir, "data-dir", "data", "`DIR` of the Badger database and the coordinator's secret")
	fs.StringVar(&o.apiListen, "api-listen", defaultAPIListen, "`ADDR` of the HTTP API")
	fs.StringVar(&o.mqttListen, "mqtt-listen", "127.0.0.1:1883", "`ADDR` of the embedded MQTT broker")
	fs.BoolVar(&o.mqttInsecure, "mqtt-insecure", false, "serve plain MQTT, without --tls-cert, on a --mqtt-listen that is not loopback: BMC passwords, "+
		"site passwords and ramdisk credentials then cross the network in the clear. Without it (default false) serve refuses that and "+
		"asks for --tls-cert and --tls-key (the broker then speaks mqtts); only for a lab network nobody else can reach")
	connBudgetFlags(fs, &o.apiConns, "api", "the API", server.DefaultAPIConnLimits, "first request header",
		"an operator's proxy in front of the API comes from one address: raise the per-source caps for it")
	connBudgetFlags(fs, &o.mqttConns, "mqtt", "the embedded MQTT broker", mqttbroker.DefaultConnLimits, "whole CONNECT",
		"a site's ramdisks behind one NAT address share them; benchmarks' simulated sites all come from 127.0.0.1")
	fs.IntVar(&o.fdReserve, "fd-reserve", netbudget.DefaultReserve, "file descriptors (`N`) the listeners leave to the Badger store and the rest of the process: "+
		"the API and the broker together hold at most the NOFILE limit less N, and a connection accepted when fewer than N are left is closed at once")
	fs.StringVar(&o.brokerURL, "broker-url", "", "use this external MQTT v5 broker `URL` (mqtt://host:port, or mqtts://host:port with --broker-ca-file) instead of the embedded one; its access rules are then the broker's job (docs/architecture.md lists the rules to configure)")
	fs.StringVar(&o.brokerCA, "broker-ca-file", "", "CA (PEM) `FILE` that signs the external broker's certificate, for an mqtts:// --broker-url")
	fs.StringVar(&o.brokerUser, "broker-username", "", "`USER` at the external broker (default: the coordinator's own)")
	fs.StringVar(&o.brokerPW, "broker-password", "", "`PASSWORD` at the external broker (env COORDINATOR_BROKER_PASSWORD)")
	fs.StringVar(&o.advertise, "advertise-broker-url", "", "broker `URL` written into site credentials files by site add and site rotate (default: the broker's own address; required with a --mqtt-listen on every interface, such as 0.0.0.0:8883); "+
		"a cluster's members each give the list of every member's broker, separated by commas, which edge agents try in turn (only the leader runs one)")
	fs.IntVar(&o.maxPacket, "max-packet-size", mqttbroker.DefaultMaxPacketSize, "largest MQTT packet the embedded broker reads after CONNECT, in `BYTES` (CONNECT itself: 16 KiB)")
	fs.DurationVar(&o.waitTimeout, "wait-timeout", 30*time.Minute, "a WAIT state that hears nothing this long fails (heartbeats reset it)")
	fs.DurationVar(&o.cmdTimeout, "command-timeout", 5*time.Minute, "an out-of-band command without a result this long fails")
	fs.DurationVar(&o.resend, "resend-interval", 10*time.Second, "how often an unanswered command is sent again")
	fs.DurationVar(&o.tick, "tick", time.Second, "how often timeouts and resends are checked")
	fs.StringVar(&o.defaultSite, "default-site", "", "the site (conductor_group) of a node created without one, as Ironic's clients (gophercloud, Metal3) create them; "+
		"without it such a node goes to the only site when exactly one is registered, and is refused (400) when there are several")
	fs.BoolVar(&o.autoClean, "automated-clean", true, "run automated cleaning on provide and after undeploy")
	fs.BoolVar(&o.forcePower, "force-power-state-during-sync", true, "when an edge agent reports a resting node's BMC in another power state than recorded, power it back (false: record the BMC's state; docs/drivers.md, Power-state sync)")
	fs.BoolVar(&o.fastTrack, "fast-track", false, "fast track (Ironic's [deploy]fast_track): after inspect or a cleaning the node stays powered on in its ramdisk, "+
		"and its next inspect, provide, clean or deploy within --fast-track-timeout starts in that ramdisk without a power cycle (the running boot's "+
		"credential and agent token go on; a new boot still gets new ones). A node's driver_info fast_track=true|false overrides it (docs/deploy.md, Fast track)")
	fs.DurationVar(&o.fastTrackTimeout, "fast-track-timeout", fsm.DefaultFastTrackTimeout, "with fast track, a ramdisk counts as running if it heartbeated within this `DURATION` "+
		"(Ironic's [deploy]fast_track_timeout, 300 s), and a node kept in its ramdisk that no operation used this long after the last one ended is powered off")
	fs.BoolVar(&o.allowMD5, "allow-md5-checksum", false, "take md5 and sha1 image checksums (Ironic's [agent]allow_md5_checksum): a deploy with one is verified with it by the ramdisk; "+
		"without it such a deploy is refused (400). sha256 and sha512 are always taken")
	fs.StringVar(&o.quarantineOn, "quarantine-on", "off", "quarantine policy: `off`, critical or warning. An available node (not in maintenance) whose health, at its site's next report, "+
		"is this or worse is set into maintenance with a reason naming the sensors, so that nothing hands it out; nodes in other states are not touched (docs/remote-hands.md, Quarantine)")
	fs.BoolVar(&o.edgePlans, "edge-plans", true, "hand the rest of a clean, deploy or service phase to the site's edge agent as one plan when the agent runs plans "+
		"(it relays its ramdisks): the site goes from step to step by itself, also while its link is down, and the results are applied here in order, "+
		"with the same history and failure rules; false sends each step's command alone (docs/edge.md, Plans)")
	fs.Var(o.prio, "clean-step-priority", "override an automated clean step's priority: `interface.step=N` (0 disables); repeatable")
	fs.IntVar(&o.maxClean, "max-concurrent-clean", 1000, "`N` nodes that may run a manual clean at once (more get HTTP 500 with Ironic's message; provide is not capped)")
	fs.IntVar(&o.maxDeploy, "max-concurrent-deploy", 1000, "`N` nodes that may deploy at once (more get HTTP 500 with Ironic's message)")
	fs.IntVar(&o.histMax, "history-max-entries", 300, "`N` history entries kept per node; past it the oldest are deleted (Ironic's node_history_max_entries)")
	fs.StringVar(&o.inspectionRules, "inspection-rules", "", "built-in inspection rules `FILE` (Ironic's [inspection_rules]built_in_rules): a YAML or JSON list of rules in the API's shape, "+
		"run on every inspection with the stored ones, listed by inspection-rule list and not changeable there; a wrong rule stops the start, naming it (docs/discovery.md, Inspection rules)")
	fs.StringVar(&o.auth, "auth", "none", "API authentication `MODE`: none (only with a loopback --api-listen) or http_basic (with --htpasswd)")
	fs.StringVar(&o.htpasswd, "htpasswd", "", "htpasswd `FILE` of bcrypt entries of cost 10 or more for --auth http_basic ('htpasswd -cB -C 12 FILE USER', Debian's apache2-utils: -B alone makes cost 5); other hash types and lower costs are refused at start, naming the line")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate `FILE` (followed by its CA, so that ramdisks can check it by pin): serve the API over https and the embedded broker over mqtts (with --tls-key; 'coordinator certs' makes a lab pair)")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	fs.StringVar(&o.clusterMember, "cluster-member", "", "run as the member `NAME` of a coordinator cluster (with --cluster-listen and --cluster-peers; docs/cluster.md): "+
		"the engine runs on the leader only, every batch it commits is replicated to every member's store, and every member answers the API. Without it (default) the coordinator runs alone")
	fs.StringVar(&o.clusterListen, "cluster-listen", "", "`HOST:PORT` of this member's cluster link (mutual TLS with member certificates)")
	fs.StringVar(&o.clusterPeers, "cluster-peers", "", "every member of the cluster, this one included: `NAME=HOST:PORT,...`; the first start of members with the same list forms the cluster")
	fs.StringVar(&o.clusterBrokerURL, "cluster-broker-url", "", "this member's embedded broker `URL` as the sites reach it: while it leads, the other members' brokers refuse a site's CONNECT "+
		"with MQTT v5 code 0x9C (use another server) and this URL as Server Reference (default: mqtt:// or, with --tls-cert, mqtts:// and --mqtt-listen)")
	fs.StringVar(&o.clusterCert, "cluster-cert", "", "this member's certificate (PEM) `FILE` for the cluster link ('coordinator certs --dir DIR --member NAME' writes DIR/member-NAME.pem)")
	fs.StringVar(&o.clusterCertKey, "cluster-cert-key", "", "the private key (PEM) `FILE` of --cluster-cert")
	fs.StringVar(&o.clusterCA, "cluster-ca", "", "the cluster's CA (PEM) `FILE`: the cluster link accepts only member certificates it signed")
	fs.BoolVarP(&o.verbose, "verbose", "v", false, "log every node event")
	_ = cc.RegisterFlagCompletionFunc("auth", fixed("none", "http_basic"))
	_ = cc.MarkFlagDirname("data-dir")
	return cc
}

// cpuProfileEnv names a file to which serve writes a CPU profile of the
// coordinator from its start until it is asked to stop (SIGINT or
// SIGTERM), for benchmarks (docs/benchmarks.md); unset, no profile. A
// cluster member writes FILE.NAME (its --cluster-member), so that the
// members of a cluster started with one environment do not write one
// file.
const cpuProfileEnv = "COORDINATOR_CPU_PROFILE"

// cpuProfile starts the profile cpuProfileEnv asks for; the profile
// ends when ctx does or when the function returned is called.
func cpuProfile(ctx context.Context, log *slog.Logger, member string) (stop func()) {
	path := os.Getenv(cpuProfileEnv)
	if path == "" {
		return func() {}
	}
	if member != "" {
		path += "." + member
	}
	f, err := os.Create(path)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		log.Warn("no CPU profile", "env", cpuProfileEnv, "err", err)
		return func() {}
	}
	var once sync.Once
	end := func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		})
	}
	go func() {
		<-ctx.Done()
		end()
	}()
	return end
}

func (c *cmd) serve(cc *cobra.Command, o *serveOptions) error {
	if !cc.Flags().Changed("broker-password") {
		o.brokerPW = os.Getenv("COORDINATOR_BROKER_PASSWORD")
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(c.err, &slog.HandlerOptions{Level: level}))
	overrides := map[string]int{}
	for k, v := range o.prio {
		n, err := strconv.Atoi(v)
		if err != nil || !strings.Contains(k, ".") {
			return usagef("--clean-step-priority %s=%s: want interface.step=N", k, v)
		}
		overrides[k] = n
	}
	if o.fdReserve < 1 {
		return usagef("--fd-reserve %d: give at least 1 (default %d) file descriptors to keep for the store", o.fdReserve, netbudget.DefaultReserve)
	}
	for _, l := range []struct {
		name string
		v    netbudget.Limits
	}{{"api", o.apiConns}, {"mqtt", o.mqttConns}} {
		if l.v.MaxConns < 1 || l.v.MaxPerSource < 1 || l.v.MaxPendingPerSource < 1 {
			return usagef("--%s-max-connections, --%[1]s-max-connections-per-source and --%[1]s-max-pending-per-source must be at least 1", l.name)
		}
	}
	if o.fastTrackTimeout < time.Second {
		return usagef("--fast-track-timeout %s: give at least 1s (default %s, Ironic's fast_track_timeout); a ramdisk heartbeats every few seconds", o.fastTrackTimeout, fsm.DefaultFastTrackTimeout)
	}
	quarantine, ok := map[string]string{"off": "", "critical": protocol.HealthCritical, "warning": protocol.HealthWarning}[strings.ToLower(o.quarantineOn)]
	if !ok {
		return usagef("--quarantine-on %q: give off, critical or warning", o.quarantineOn)
	}
	if err := plainMQTTCheck(o); err != nil {
		return err
	}
	if err := advertiseCheck(o); err != nil {
		return err
	}
	var builtIn []inspectrules.Rule
	if o.inspectionRules != "" {
		data, err := os.ReadFile(o.inspectionRules)
		if err != nil {
			return fmt.Errorf("--inspection-rules: %v", err)
		}
		if builtIn, err = inspectrules.ParseBuiltIn(data); err != nil {
			return fmt.Errorf("--inspection-rules %s: %v", o.inspectionRules, err)
		}
	}
	member, err := openMember(o, log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer cpuProfile(ctx, log, o.clusterMember)()
	co, err := server.Start(ctx, server.Options{Cluster: member, DataDir: o.dataDir, APIListen: o.apiListen, MQTTListen: o.mqttListen,
		BrokerURL: o.brokerURL, BrokerUser: o.brokerUser, BrokerPassword: o.brokerPW, AdvertisedBrokerURL: o.advertise,
		Auth: o.auth, HTPasswd: o.htpasswd, TLSCert: o.tlsCert, TLSKey: o.tlsKey, BrokerCAFile: o.brokerCA, MaxPacketSize: o.maxPacket,
		Machine: fsm.Config{WaitTimeout: o.waitTimeout, CommandTimeout: o.cmdTimeout, ResendInterval: o.resend,
			AutomatedClean: o.autoClean, PriorityOverrides: overrides, ForcePowerStateDuringSync: o.forcePower,
			FastTrack: o.fastTrack, FastTrackTimeout: o.fastTrackTimeout, AllowMD5Checksum: o.allowMD5,
			QuarantineOn: quarantine},
		MaxConcurrentClean: o.maxClean, MaxConcurrentDeploy: o.maxDeploy, TickInterval: o.tick, HistoryMaxEntries: o.histMax, Log: log,
		FDReserve: o.fdReserve, APIConns: o.apiConns, MQTTConns: o.mqttConns, NoEdgePlans: !o.edgePlans, DefaultSite: o.defaultSite,
		BuiltInInspectionRules: builtIn})
	if err != nil {
		if member != nil {
			member.Close()
		}
		if isStoreFailure(err) {
			return exitCode(ExitStoreFailed) // the engine logged why
		}
		return err
	}
	if member != nil {
		log.Info("cluster member serving", "member", o.clusterMember, "api", co.APIURL, "auth", o.auth, "cluster", o.clusterListen, "data", o.dataDir)
	} else {
		log.Info("coordinator serving", "api", co.APIURL, "auth", o.auth, "broker", co.BrokerURL, "data", o.dataDir)
	}
	select {
	case <-ctx.Done():
	case <-co.Failed():
		return storeFailed(co)
	}
	log.Info("shutting down")
	co.Close()
	return nil
}

// openMember opens the cluster member of the --cluster-* flags, nil
// without them (a coordinator alone, as by default).
func openMember(o *serveOptions, log *slog.Logger) (*cluster.Member, error) {
	if o.clusterMember == "" && o.clusterListen == "" && o.clusterPeers == "" {
		if o.clusterCert != "" || o.clusterCertKey != "" || o.clusterCA != "" {
			return nil, usagef("--cluster-cert, --cluster-cert-key and --cluster-ca are for a cluster member: add --cluster-member, --cluster-listen and --cluster-peers")
		}
		return nil, nil
	}
	if o.clusterMember == "" || o.clusterListen == "" || o.clusterPeers == "" {
		return nil, usagef("a cluster member needs --cluster-member NAME, --cluster-listen HOST:PORT and --cluster-peers NAME=HOST:PORT,... (every member, itself included)")
	}
	if o.clusterCert == "" || o.clusterCertKey == "" || o.clusterCA == "" {
		return nil, usagef("a cluster member needs its member certificate: --cluster-cert FILE --cluster-cert-key FILE --cluster-ca FILE ('coordinator certs --dir DIR --member %s' makes them)", o.clusterMember)
	}
	peers, err := cluster.ParsePeers(o.clusterPeers)
	if err != nil {
		return nil, usagef("%v", err)
	}
	ref, err := memberBrokerURL(o)
	if err != nil {
		return nil, err
	}
	tc, err := cluster.LoadTLS(o.clusterCert, o.clusterCertKey, o.clusterCA)
	if err != nil {
		return nil, err
	}
	return cluster.Open(cluster.Config{Name: o.clusterMember, Listen: o.clusterListen, Peers: peers, DataDir: o.dataDir, TLS: tc, Log: log, BrokerURL: ref})
}

// memberBrokerURL is the member's own broker URL for the Server
// Reference (--cluster-broker-url, or --mqtt-listen's address); "" with
// an external broker, which every member shares.
func memberBrokerURL(o *serveOptions) (string, error) {
	if o.brokerURL != "" {
		if o.clusterBrokerURL != "" {
			return "", usagef("--cluster-broker-url names this member's embedded broker; with --broker-url every member uses the external broker: drop one of them")
		}
		return "", nil
	}
	scheme := "mqtt"
	if o.tlsCert != "" {
		scheme = "mqtts"
	}
	if o.clusterBrokerURL != "" {
		u, err := url.Parse(o.clusterBrokerURL)
		if err != nil || u.Host == "" || u.Scheme != scheme || strings.Contains(o.clusterBrokerURL, ",") {
			return "", usagef("--cluster-broker-url %q: give one URL %s://HOST:PORT, this member's broker as the sites reach it", o.clusterBrokerURL, scheme)
		}
		return o.clusterBrokerURL, nil
	}
	host, port, err := net.SplitHostPort(o.mqttListen)
	if err != nil {
		return "", nil // the listener reports a malformed address itself
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return "", usagef("--mqtt-listen %s listens on every interface, so a cluster member has no broker address to give sites: add --cluster-broker-url %s://HOST:%s "+
			"with the name or address the sites reach this member by", o.mqttListen, scheme, port)
	}
	return scheme + "://" + o.mqttListen, nil
}

// ExitStoreFailed is serve's exit status when the database failed while
// it ran (or during its start): the engine logged one line with the cause
// and what to do, and stopped taking work.
const ExitStoreFailed = 3

const serveExitHelp = `

Exit status: 0 after SIGINT or SIGTERM; 1 when it cannot start (the error says why); 2
for a usage error; 3 when the Badger store fails (a write, a memtable flush or a garbage
collection fails, as when the process runs out of file descriptors or the disk is full):
one ERROR line names the cause and what to do, the API answers 503 until the process
ends, and nothing unstored was acknowledged, so starting it again (after raising
LimitNOFILE or freeing disk space) recovers every node.`

// isStoreFailure tells a failure of the store (logged by the engine) from
// other errors at start.
func isStoreFailure(err error) bool {
	var fe *store.FailedError
	return errors.As(err, &fe)
}

// storeFailed ends serve after the store failed: the listeners are closed
// (requests meanwhile got 503) and the process exits with
// ExitStoreFailed. A close that hangs (the engine stuck in the failed
// database) is not waited for: nothing is lost without it.
func storeFailed(co *server.Coordinator) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		co.Close()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	return exitCode(ExitStoreFailed)
}

// plainMQTTCheck refuses, before anything is opened, the embedded broker
// without TLS on an address that is not loopback, unless the operator
// says --mqtt-insecure: site passwords, BMC passwords (in commands) and
// ramdisk credentials cross it. Like --auth none off loopback.
func plainMQTTCheck(o *serveOptions) error {
	if o.brokerURL != "" || o.tlsCert != "" || o.mqttInsecure || netbudget.LoopbackAddr(o.mqttListen) {
		return nil
	}
	return fmt.Errorf("refusing to serve plain MQTT on %s: site passwords, BMC passwords and ramdisk credentials would cross the network "+
		"in the clear. Add --tls-cert FILE --tls-key FILE (the broker then speaks mqtts; 'coordinator certs' makes a lab pair), "+
		"or listen on loopback (--mqtt-listen 127.0.0.1:1883), or, on a lab network nobody else can reach, say --mqtt-insecure", o.mqttListen)
}

// advertiseCheck refuses, before anything is opened, an embedded broker
// on every interface (0.0.0.0, ::, or no host) without
// --advertise-broker-url: site add and site rotate write the broker's
// URL into the site's credentials file, and mqtt://0.0.0.0:PORT is an
// address no edge agent can connect to.
func advertiseCheck(o *serveOptions) error {
	if o.brokerURL != "" || o.advertise != "" {
		return nil
	}
	host, port, err := net.SplitHostPort(o.mqttListen)
	if err != nil {
		return nil // the listener reports a malformed address itself
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return nil
	}
	scheme := "mqtt"
	if o.tlsCert != "" {
		scheme = "mqtts"
	}
	return fmt.Errorf("--mqtt-listen %s listens on every interface, so the broker has no address to write into site credentials files "+
		"(site add, site rotate): add --advertise-broker-url %s://HOST:%s with the name or address the sites reach this coordinator by", o.mqttListen, scheme, port)
}
