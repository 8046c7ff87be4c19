package main

import (
	"flag"

	"github.com/bmedge/bmedge/agent"
)

// siteBrokerFlags declares the flags of agent.SiteBrokerOptions; the returned function
// reads them after parsing.
func siteBrokerFlags(fs *flag.FlagSet) func() agent.SiteBrokerOptions {
	return func() agent.SiteBrokerOptions { return agent.SiteBrokerOptions{} }
}
