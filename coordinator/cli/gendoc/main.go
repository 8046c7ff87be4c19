// Command gendoc writes docs/cli.md from the coordinator's command tree,
// so that the reference cannot drift from the program (make cli-doc):
//
//	go run ./coordinator/cli/gendoc docs/cli.md
package main

import (
	"bytes"
	"fmt"
	"os"

	"github.com/bmedge/bmedge/coordinator/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendoc FILE (docs/cli.md)")
		os.Exit(2)
	}
	var b bytes.Buffer
	if err := cli.WriteMarkdown(&b); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(os.Args[1], b.Bytes(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}
