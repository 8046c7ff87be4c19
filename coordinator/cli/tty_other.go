//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package cli

import "io"

// terminalWidth says whether w is a terminal: here, never, so --wait
// prints plain lines.
func terminalWidth(io.Writer) (int, bool) { return 0, false }
