// Command coordinator is the central service of the bare-metal lifecycle
// system and the operator's command line (see 'coordinator help').
package main

import (
	"os"

	"github.com/bmedge/bmedge/coordinator/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
