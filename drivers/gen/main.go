// Command gen writes docs/steps.md, the step catalogue, from the step
// declarations of the built-in drivers and the standard ramdisk.
package main

import (
	"fmt"
	"os"

	"github.com/bmedge/bmedge/drivers"
)

func main() {
	out := "docs/steps.md"
	if len(os.Args) > 1 {
		out = os.Args[1]
	}
	if err := os.WriteFile(out, []byte(drivers.StepsMarkdown(drivers.Builtin())), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
