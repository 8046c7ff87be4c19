// Package cli is the operator's command line: `coordinator serve` and the
// verbs that talk to a running coordinator's API. Only this package and
// main read flags. It must never touch the database directly.
package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/bmedge/bmedge/coordinator/broker"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/server"
)

// Main runs the command line with args (without the program name).
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cmd{stdin: stdin, out: stdout, err: stderr}
	return c.run(args)
}

type cmd struct {
	stdin    io.Reader
	out, err io.Writer
	url      string
	format   string
	creds    credentials
}

const usage = `coordinator: bare-metal lifecycle for remote sites, in Ironic's tradition.

Usage:
  coordinator serve [--data-dir DIR] [--api-listen ADDR] [--mqtt-listen ADDR] [--broker-url URL]
                    [--auth none|http_basic --htpasswd FILE] [--tls-cert FILE --tls-key FILE]
  coordinator certs --dir DIR [--host NAME_OR_IP]... [--force]   make a lab CA and server certificate for TLS
  coordinator site add NAME --credentials-file FILE     register a site, write its edge agent's credentials
  coordinator site list
  coordinator node create --name NAME --driver fake|ipmi|redfish --site SITE [--driver-info K=V]... [--property K=V]... [--port MAC]...
  coordinator node list [--provision-state S] [--maintenance] [--retired] [--site SITE] [--limit N]
  coordinator node show NODE
  coordinator node set NODE [--name N] [--driver-info K=V]... [--property K=V]... [--instance-info K=V]... [--extra K=V]...
                            [--retired --retired-reason TEXT] [--maintenance --reason TEXT]
  coordinator node unset NODE [--retired] [--maintenance] [--driver-info K]... [--property K]... [--instance-info K]... [--extra K]...
  coordinator node delete NODE
  coordinator node manage|inspect|provide|deploy|rebuild|unrescue|undeploy|abort NODE [--wait [SECONDS]]
  coordinator node rescue NODE --rescue-password PW [--wait [SECONDS]]
  coordinator node clean NODE --clean-steps FILE|- [--wait [SECONDS]]
  coordinator node wait NODE [--wait SECONDS]          follow a node until it rests
  coordinator node power NODE on|off|reboot
  coordinator node steps NODE [--min-priority N]
  coordinator node history NODE
  coordinator node inventory NODE
  coordinator port create MAC --node NODE
  coordinator port list [--node NODE]
  coordinator port delete PORT

Global flags (anywhere on the line):
  --url URL             coordinator API (env COORDINATOR_URL, default http://127.0.0.1:6385)
  -f table|json         output format (default table)
  --os-username USER    user at a coordinator with --auth http_basic (env OS_USERNAME)
  --os-password PW      its password (env OS_PASSWORD; the variable keeps it out of ps)
  --os-cacert FILE      CA certificate that signed an https coordinator's (env OS_CACERT)

--wait follows the node until it rests, printing each state and step, and exits 1
with last_error when the node lands in a failed state (2 on timeout).
NODE is a name or a UUID. Run 'coordinator COMMAND --help' for a command's flags.
`

func (c *cmd) fail(format string, a ...any) int {
	fmt.Fprintf(c.err, "error: "+format+"\n", a...)
	return 1
}

func (c *cmd) run(args []string) int {
	c.url = os.Getenv("COORDINATOR_URL")
	if c.url == "" {
		c.url = "http://127.0.0.1:6385"
	}
	c.format = "table"
	// The same names as the baremetal CLI's, so one set of variables
	// serves both.
	c.creds = credentials{user: os.Getenv("OS_USERNAME"), password: os.Getenv("OS_PASSWORD"), cacert: os.Getenv("OS_CACERT")}
	globals := map[string]*string{"--os-username": &c.creds.user, "--os-password": &c.creds.password, "--os-cacert": &c.creds.cacert}
	// Global flags may stand anywhere.
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		if dst, ok := globals[name]; ok && (hasVal || i+1 < len(args)) {
			if !hasVal {
				val = args[i+1]
				i++
			}
			*dst = val
			continue
		}
		switch {
		case a == "--url" && i+1 < len(args):
			c.url = args[i+1]
			i++
		case strings.HasPrefix(a, "--url="):
			c.url = strings.TrimPrefix(a, "--url=")
		case (a == "-f" || a == "--format") && i+1 < len(args):
			c.format = args[i+1]
			i++
		case strings.HasPrefix(a, "--format="):
			c.format = strings.TrimPrefix(a, "--format=")
		default:
			rest = append(rest, a)
		}
	}
	if c.format != "table" && c.format != "json" {
		return c.fail("output format %q is not known; use -f table or -f json", c.format)
	}
	if len(rest) == 0 || rest[0] == "help" || rest[0] == "--help" || rest[0] == "-h" {
		fmt.Fprint(c.out, usage)
		if len(rest) == 0 {
			return 2
		}
		return 0
	}
	switch rest[0] {
	case "serve":
		return c.serve(rest[1:])
	case "certs":
		return c.certs(rest[1:])
	case "site":
		return c.site(rest[1:])
	case "node":
		return c.node(rest[1:])
	case "port":
		return c.port(rest[1:])
	}
	return c.fail("unknown command %q; run 'coordinator help' to see the commands", rest[0])
}

// kv collects repeated K=V flags.
type kv map[string]string

func (m kv) String() string { return "" }
func (m kv) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not KEY=VALUE", s)
	}
	m[k] = v
	return nil
}

// list collects repeated flags.
type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

// parse parses flags that may come after positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos, flags []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return pos, nil
}

func (c *cmd) flags(name, help string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.err)
	fs.Usage = func() {
		fmt.Fprintf(c.err, "Usage: coordinator %s\n", help)
		fs.PrintDefaults()
	}
	return fs
}

func (c *cmd) serve(args []string) int {
	fs := c.flags("serve", "serve [flags]\n\nRuns the coordinator: API, state machine, Badger store and (unless --broker-url) the embedded MQTT broker.")
	dataDir := fs.String("data-dir", "data", "folder of the Badger database and the coordinator's secret")
	apiListen := fs.String("api-listen", "127.0.0.1:6385", "address of the HTTP API")
	mqttListen := fs.String("mqtt-listen", "127.0.0.1:1883", "address of the embedded MQTT broker")
	brokerURL := fs.String("broker-url", "", "use this external MQTT v5 broker (mqtt://host:port, or mqtts://host:port with --broker-ca-file) instead of the embedded one")
	brokerCA := fs.String("broker-ca-file", "", "CA (PEM) that signs the external broker's certificate, for an mqtts:// --broker-url")
	maxPacket := fs.Int("max-packet-size", broker.DefaultMaxPacketSize, "largest MQTT packet the embedded broker reads after CONNECT, in bytes (CONNECT itself: 16 KiB)")
	brokerUser := fs.String("broker-username", "", "username at the external broker (default: the coordinator's own)")
	brokerPass := fs.String("broker-password", os.Getenv("COORDINATOR_BROKER_PASSWORD"), "password at the external broker (env COORDINATOR_BROKER_PASSWORD)")
	advertise := fs.String("advertise-broker-url", "", "broker URL written into site credentials files (default: the broker's own)")
	waitTimeout := fs.Duration("wait-timeout", 30*time.Minute, "a WAIT state that hears nothing this long fails (reset by heartbeats)")
	cmdTimeout := fs.Duration("command-timeout", 5*time.Minute, "an out-of-band command without a result this long fails")
	resend := fs.Duration("resend-interval", 10*time.Second, "how often an unanswered command is sent again")
	tick := fs.Duration("tick", time.Second, "how often timeouts and resends are checked")
	autoClean := fs.Bool("automated-clean", true, "run automated cleaning on provide and after undeploy")
	forcePower := fs.Bool("force-power-state-during-sync", true, "when an edge agent reports a resting node's BMC in another power state than recorded, power it back (false: record the BMC's state)")
	var prio kv = kv{}
	fs.Var(prio, "clean-step-priority", "override an automated clean step's priority: interface.step=N (0 disables); repeatable")
	maxClean := fs.Int("max-concurrent-clean", 1000, "nodes that may clean at once (more get 503)")
	maxDeploy := fs.Int("max-concurrent-deploy", 1000, "nodes that may deploy at once (more get 503)")
	histMax := fs.Int("history-max-entries", 300, "history entries kept per node; past it the oldest are deleted (Ironic's node_history_max_entries)")
	auth := fs.String("auth", "none", "API authentication: none (only with a loopback --api-listen) or http_basic (with --htpasswd)")
	htpasswd := fs.String("htpasswd", "", "htpasswd file of bcrypt entries ('htpasswd -B') for --auth http_basic")
	tlsCert := fs.String("tls-cert", "", "PEM certificate (followed by its CA, so that ramdisks can check it by pin): serve the API over https and the embedded broker over mqtts (with --tls-key; 'coordinator certs' makes a lab pair)")
	tlsKey := fs.String("tls-key", "", "PEM private key of --tls-cert")
	verbose := fs.Bool("v", false, "log every node event")
	if _, err := parse(fs, args); err != nil {
		return 2
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(c.err, &slog.HandlerOptions{Level: level}))
	overrides := map[string]int{}
	for k, v := range prio {
		n, err := strconv.Atoi(v)
		if err != nil || !strings.Contains(k, ".") {
			return c.fail("--clean-step-priority %s=%s: want interface.step=N", k, v)
		}
		overrides[k] = n
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	co, err := server.Start(ctx, server.Options{DataDir: *dataDir, APIListen: *apiListen, MQTTListen: *mqttListen,
		BrokerURL: *brokerURL, BrokerUser: *brokerUser, BrokerPassword: *brokerPass, AdvertisedBrokerURL: *advertise,
		Auth: *auth, HTPasswd: *htpasswd, TLSCert: *tlsCert, TLSKey: *tlsKey, BrokerCAFile: *brokerCA, MaxPacketSize: *maxPacket,
		Machine: fsm.Config{WaitTimeout: *waitTimeout, CommandTimeout: *cmdTimeout, ResendInterval: *resend,
			AutomatedClean: *autoClean, PriorityOverrides: overrides, ForcePowerStateDuringSync: *forcePower},
		MaxConcurrentClean: *maxClean, MaxConcurrentDeploy: *maxDeploy, TickInterval: *tick, HistoryMaxEntries: *histMax, Log: log})
	if err != nil {
		return c.fail("%v", err)
	}
	log.Info("coordinator serving", "api", co.APIURL, "auth", *auth, "broker", co.BrokerURL, "data", *dataDir)
	<-ctx.Done()
	log.Info("shutting down")
	co.Close()
	return 0
}

// apiClient returns a client of the coordinator's API with the
// credentials and CA of the command line.
func (c *cmd) apiClient() (*client, error) {
	return newClient(c.url, c.creds)
}

func (c *cmd) site(args []string) int {
	if len(args) == 0 {
		return c.fail("usage: coordinator site add NAME --credentials-file FILE | site list")
	}
	cl, cerr := c.apiClient()
	if cerr != nil {
		return c.fail("%v", cerr)
	}
	switch args[0] {
	case "add":
		fs := c.flags("site add", "site add NAME --credentials-file FILE\n\nRegisters a site and writes the credentials its edge agent connects with (mode 0600).")
		file := fs.String("credentials-file", "", "where to write the edge agent's credentials (required)")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return 2
		}
		if len(pos) != 1 || *file == "" {
			return c.fail("usage: coordinator site add NAME --credentials-file FILE")
		}
		var resp map[string]any
		if _, _, err := cl.do("POST", "/v1/sites", map[string]string{"name": pos[0]}, &resp); err != nil {
			return c.fail("%v", err)
		}
		b, _ := json.MarshalIndent(resp, "", "  ")
		if err := os.WriteFile(*file, append(b, '\n'), 0o600); err != nil {
			return c.fail("site %s was registered but its credentials could not be written: %v", pos[0], err)
		}
		fmt.Fprintf(c.out, "site %s registered; edge agent credentials written to %s\n", pos[0], *file)
		return 0
	case "list":
		var resp struct {
			Sites []map[string]any `json:"sites"`
		}
		if _, _, err := cl.do("GET", "/v1/sites", nil, &resp); err != nil {
			return c.fail("%v", err)
		}
		return c.table(resp.Sites, []string{"name", "online", "nodes", "created_at"})
	}
	return c.fail("unknown site command %q; use add or list", args[0])
}

// table prints rows with the given columns, or JSON with -f json.
func (c *cmd) table(rows []map[string]any, cols []string) int {
	if c.format == "json" {
		if rows == nil {
			rows = []map[string]any{}
		}
		b, _ := json.MarshalIndent(rows, "", "  ")
		fmt.Fprintln(c.out, string(b))
		return 0
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	head := make([]string, len(cols))
	for i, col := range cols {
		head[i] = strings.ToUpper(strings.ReplaceAll(col, "_", " "))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		vals := make([]string, len(cols))
		for i, col := range cols {
			vals[i] = cell(r[col])
		}
		fmt.Fprintln(tw, strings.Join(vals, "\t"))
	}
	tw.Flush()
	return 0
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return x
	case map[string]any, []any:
		b, _ := json.Marshal(x)
		return string(b)
	}
	return fmt.Sprint(v)
}

// record prints one object as field/value lines, or JSON.
func (c *cmd) record(v map[string]any) int {
	if c.format == "json" {
		b, _ := json.MarshalIndent(v, "", "  ")
		fmt.Fprintln(c.out, string(b))
		return 0
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		if k != "links" && k != "ports" && k != "states" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%s\n", k, cell(v[k]))
	}
	tw.Flush()
	return 0
}
