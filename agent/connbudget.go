package agent

import (
	"github.com/bmedge/bmedge/agent/boot"
	"github.com/bmedge/bmedge/agent/relay"
	"github.com/bmedge/bmedge/agent/sitecache"
	"log/slog"
	"net"

	"github.com/bmedge/bmedge/lib/netbudget"
)

// Connection budgets of the edge agent's HTTP listeners (the site
// broker's are mqttbroker.DefaultConnLimits). All the agent's listeners
// share the process's descriptor pool (netbudget.Default: NOFILE less
// agent --fd-reserve). A connection is pending until its first request
// header is read (each server's ReadHeaderTimeout closes it after 10 s).
var (
	// DefaultMediaConns: the BMCs fetch the ISO, each from its own
	// address, a few range requests at once (agent/boot's).
	DefaultMediaConns = boot.DefaultMediaConns
	// DefaultImageCacheConns: the nodes' ramdisks fetch their images
	// (agent/sitecache's).
	DefaultImageCacheConns = sitecache.DefaultConns
	// DefaultNetbootHTTPConns: iPXE fetches a script, a kernel and an
	// initramfs per boot (agent/boot's).
	DefaultNetbootHTTPConns = boot.DefaultNetbootHTTPConns
	// DefaultMetricsConns: a scraper or two, on loopback by default.
	DefaultMetricsConns = netbudget.Limits{MaxConns: 64, MaxPerSource: 16, MaxPendingPerSource: 8}
)

// budgeted wraps the raw TCP listener ln in the process pool's budgets
// lim (fields <= 0 from def); name is the prefix of its flags.
func budgeted(ln net.Listener, name string, lim, def netbudget.Limits, log *slog.Logger) net.Listener {
	return netbudget.Default().Wrap(ln, netbudget.Options{Name: name, Limits: lim.Or(def), Log: log})
}

// RamdiskOptions and NetbootOptions are agent/boot's (virtual media and
// network boot of the ramdisk).
type (
	RamdiskOptions = boot.RamdiskOptions
	NetbootOptions = boot.NetbootOptions
)

// DefaultNetbootKernelParams is agent/boot's.
const DefaultNetbootKernelParams = boot.DefaultNetbootKernelParams

// SiteBrokerOptions are agent/relay's (the site broker).
type SiteBrokerOptions = relay.SiteBrokerOptions

// DefaultHeartbeatSummary is agent/relay's.
const DefaultHeartbeatSummary = relay.DefaultHeartbeatSummary

// SiteBrokerAddr is the site broker's bound address ("" without one).
func (a *Agent) SiteBrokerAddr() string { return a.relay.Addr() }

// SiteBrokerConnStats are the site broker listener's counts (ok false
// without one).
func (a *Agent) SiteBrokerConnStats() (netbudget.Stats, bool) { return a.relay.ConnStats() }
