package main

import (
	"flag"

	"github.com/bmedge/bmedge/agent"
)

// imageCacheFlags declares the flags of agent.ImageCacheOptions; the returned function
// reads them after parsing.
func imageCacheFlags(fs *flag.FlagSet) func() agent.ImageCacheOptions {
	return func() agent.ImageCacheOptions { return agent.ImageCacheOptions{} }
}
