package main

import (
	"flag"

	"github.com/bmedge/bmedge/agent"
)

// netbootFlags declares the flags of agent.NetbootOptions; the returned function
// reads them after parsing.
func netbootFlags(fs *flag.FlagSet) func() agent.NetbootOptions {
	return func() agent.NetbootOptions { return agent.NetbootOptions{} }
}
