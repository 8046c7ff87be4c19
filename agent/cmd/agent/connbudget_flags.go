package main

import (
	"flag"
	"fmt"

	"github.com/bmedge/bmedge/lib/netbudget"
)

// connBudgetFlags declares a listener's connection budget flags
// (-NAME-max-connections, -NAME-max-connections-per-source,
// -NAME-max-pending-per-source) with defaults d; what names the
// listener, settled what ends a connection's pending time. The returned
// function reads them after parsing.
func connBudgetFlags(fs *flag.FlagSet, name, what string, d netbudget.Limits, settled string) func() netbudget.Limits {
	total := fs.Int(name+"-max-connections", d.MaxConns, fmt.Sprintf(
		"connections %s holds at once; more are closed at accept, before TLS or any read (all listeners together hold at most the NOFILE limit less --fd-reserve)", what))
	perSource := fs.Int(name+"-max-connections-per-source", d.MaxPerSource, fmt.Sprintf(
		"connections %s holds at once from one source address (an IPv4 address or an IPv6 /64; clients behind one NAT address share it); more from it are closed at accept", what))
	pending := fs.Int(name+"-max-pending-per-source", d.MaxPendingPerSource, fmt.Sprintf(
		"connections from one source address that %s holds before their %s (a stranger's idle sockets); more from it are closed at accept", what, settled))
	return func() netbudget.Limits {
		return netbudget.Limits{MaxConns: *total, MaxPerSource: *perSource, MaxPendingPerSource: *pending}
	}
}

// checkConnBudgets says what is wrong with the budget flags ("" when
// nothing): every cap must be at least 1.
func checkConnBudgets(fs *flag.FlagSet) string {
	msg := ""
	fs.VisitAll(func(f *flag.Flag) {
		if msg != "" {
			return
		}
		g, ok := f.Value.(flag.Getter)
		if !ok {
			return
		}
		if n, ok := g.Get().(int); ok && n < 1 && (f.Name == "fd-reserve" || hasSuffix(f.Name, "-max-connections", "-max-connections-per-source", "-max-pending-per-source")) {
			msg = fmt.Sprintf("--%s %d: give at least 1 (default %s)", f.Name, n, f.DefValue)
		}
	})
	return msg
}

func hasSuffix(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if len(s) > len(x) && s[len(s)-len(x):] == x {
			return true
		}
	}
	return false
}
