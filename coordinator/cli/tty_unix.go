//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package cli

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth says whether w is a terminal, and its width.
func terminalWidth(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0, false
	}
	if ws.Col == 0 {
		return 80, true
	}
	return int(ws.Col), true
}
