package cli

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/bmedge/bmedge/lib/netbudget"
)

// connBudgetFlags declares a listener's connection budget flags
// (--NAME-max-connections, --NAME-max-connections-per-source,
// --NAME-max-pending-per-source) into l, with defaults d. what names the
// listener, settled what ends a connection's pending time, note says
// who shares a source address.
func connBudgetFlags(fs *pflag.FlagSet, l *netbudget.Limits, name, what string, d netbudget.Limits, settled, note string) {
	fs.IntVar(&l.MaxConns, name+"-max-connections", d.MaxConns, fmt.Sprintf(
		"connections (`N`) %s holds at once; more are closed at accept, before TLS or any read "+
			"(and never more than the NOFILE limit less --fd-reserve, shared with the other listeners)", what))
	fs.IntVar(&l.MaxPerSource, name+"-max-connections-per-source", d.MaxPerSource, fmt.Sprintf(
		"connections (`N`) %s holds at once from one source address (an IPv4 address or an IPv6 /64); more from it are closed at accept; %s", what, note))
	fs.IntVar(&l.MaxPendingPerSource, name+"-max-pending-per-source", d.MaxPendingPerSource, fmt.Sprintf(
		"connections (`N`) from one source address that %s holds before their %s (a stranger's idle sockets); more from it are closed at accept", what, settled))
}
