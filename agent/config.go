package agent

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/bmedge/bmedge/agent/boot"
	"github.com/bmedge/bmedge/agent/relay"
	"github.com/bmedge/bmedge/agent/sim"
	"github.com/bmedge/bmedge/agent/sitecache"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/lib/netbudget"
)

// Credentials is the file `coordinator site add` writes for an edge agent.
type Credentials struct {
	Site      string `json:"site"`
	Username  string `json:"username"`
	Password  string `json:"password"`
	BrokerURL string `json:"broker_url"`
}

// LoadCredentials reads a credentials file.
func LoadCredentials(path string) (Credentials, error) {
	var c Credentials
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read credentials file: %w (create it with 'coordinator site add SITE --credentials-file %s')", err, path)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("credentials file %s is not valid JSON: %w", path, err)
	}
	if c.Username == "" || c.Password == "" || c.Site == "" {
		return c, fmt.Errorf("credentials file %s lacks site, username or password", path)
	}
	return c, nil
}

// SimOptions shape the simulated nodes (agent/sim's Options).
type SimOptions = sim.Options

// ImageCacheOptions configure the site's image cache (agent/sitecache's
// Options; docs/imagecache.md).
type ImageCacheOptions = sitecache.Options

// DefaultImageCacheBytes is the image cache's size cap when none is given.
const DefaultImageCacheBytes = sitecache.DefaultBytes

// DrivePathPrefix is where the site cache's listener serves config drives.
const DrivePathPrefix = sitecache.DrivePathPrefix

// QEMUOptions configure the development driver qemu-dev: the ramdisk the
// VMs boot and the broker address as the guests see it.
type QEMUOptions struct {
	Kernel, Initrd string
	// BrokerURL is the broker as seen from inside the VM (user-mode
	// networking reaches the host's loopback at 10.0.2.2).
	BrokerURL string
	// Cmdline is appended to the ramdisk's kernel parameters (bm.ip=...).
	Cmdline string
}

// Config configures an edge agent.
type Config struct {
	QEMU QEMUOptions
	// Ramdisk says how nodes whose BMC has virtual media (redfish) boot
	// the ramdisk: the ISO this agent serves and the broker it names.
	Ramdisk   boot.RamdiskOptions
	Site      string
	BrokerURL string
	Username  string
	Password  string
	ClientID  string
	// CAFile (PEM) is the CA that signs the broker's certificate, for an
	// mqtts:// broker URL; its pin is handed to the ramdisks this agent
	// boots (bm.ca), so that they verify the broker too.
	CAFile         string
	ResendInterval time.Duration
	// PowerSyncInterval is how often the power state of every real BMC
	// the agent knows (ipmi, redfish, qemu-dev; not the simulated ones)
	// is read; only changes and failures are reported. 0 disables it
	// (the agent command defaults it to 60 s).
	PowerSyncInterval time.Duration
	// PowerSyncConcurrency bounds the BMCs read at once (default 8).
	PowerSyncConcurrency int
	// HealthInterval: the hardware's health, sensors and event log of a
	// BMC that tells them are read with its power reading when the last
	// health reading is at least this old (0: every power sync round).
	// SensorInterval: sensor readings are sent at least this often when
	// no status changed (default 10 min).
	HealthInterval time.Duration
	// ConsoleKeep is how many bytes of each node's console output the
	// agent keeps (0: console.DefaultKeep); ConsoleBandwidth bounds the
	// bytes per second of console output the site sends (0:
	// console.DefaultBandwidth).
	ConsoleKeep, ConsoleBandwidth int
	SensorInterval                time.Duration
	// BMCConcurrency bounds the BMC commands run at once across the
	// site's BMCs (default 32); more wait their turn, each within its
	// own deadline. The relay and other nodes never wait for them.
	BMCConcurrency int
	// MetricsListen, when set, serves GET /metrics (Prometheus text
	// format) there; it must be a loopback address unless
	// MetricsListenAny is set (the metrics have no authentication).
	MetricsListen    string
	MetricsListenAny bool
	// MetricsConns are the metrics listener's connection budgets (fields
	// <= 0: DefaultMetricsConns'; connbudget.go).
	MetricsConns netbudget.Limits
	// StateDir is the folder of the durable outbox (Badger, encrypted at
	// rest with a key file created there on first start): every result
	// and power report is written there, synced, before it is first
	// published, and stays until the coordinator acknowledges it; a
	// restarted agent sends again what was not acknowledged. "" keeps the
	// outbox in memory, for in-process tests only: the agent command
	// always gives a folder.
	StateDir string
	// OutboxLimit bounds the results and power reports that wait for the
	// coordinator's ack (default DefaultOutboxLimit). At the limit the
	// agent logs it, runs no new BMC command (the coordinator resends its
	// commands) and takes no power reading until acks make room; no
	// result is ever dropped. Commands already running when the limit is
	// reached still store theirs (at most BMCConcurrency more).
	OutboxLimit int
	// SiteBroker is the site's own MQTT broker, which the ramdisks use;
	// the agent relays between it and the coordinator (agent/relay).
	SiteBroker relay.SiteBrokerOptions
	// HeartbeatSummary is how often the latest heartbeats of the site's
	// ramdisks go to the coordinator, as one message (default
	// DefaultHeartbeatSummary).
	HeartbeatSummary time.Duration
	// PlanSilenceBound: once the coordinator has not been heard (the
	// agent's link is down) for longer, a node's plan starts no next
	// step (its running one finishes) until it is heard again. 0 never
	// stops a plan for silence (the agent command defaults it to
	// DefaultPlanSilenceBound, 24 h).
	PlanSilenceBound time.Duration
	// Netboot serves network boot to nodes without virtual media.
	Netboot boot.NetbootOptions
	// Cache is the site's image cache.
	Cache ImageCacheOptions
	Sim   SimOptions
	Log   *slog.Logger
	// Clock is the agent's clock, which every part takes (nil: the
	// system clock; tests give a clock.Fake to drive the timers).
	Clock clock.Clock
}
