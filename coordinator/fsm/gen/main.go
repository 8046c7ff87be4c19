// Command gen writes docs/states.md from the transition table.
package main

import (
	"fmt"
	"os"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

func main() {
	out := "docs/states.md"
	if len(os.Args) > 1 {
		out = os.Args[1]
	}
	if err := os.WriteFile(out, []byte(fsm.Markdown()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
