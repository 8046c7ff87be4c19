package boot

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Logger writes console lines with the wall-clock time (UTC) and the
// seconds since the kernel booted, like dmesg:
//
//	2025-01-02T03:04:05.678Z [   7.123] bmramdisk: ready node=n1 ip=10.0.2.15/24
type Logger struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
}

// NewLogger returns a logger writing to w (os.Stdout if nil) with the
// given prefix (for example "bmramdisk: ").
func NewLogger(w io.Writer, prefix string) *Logger {
	if w == nil {
		w = os.Stdout
	}
	return &Logger{w: w, prefix: prefix}
}

// Printf logs one line.
func (l *Logger) Printf(format string, args ...any) {
	msg := strings.TrimRight(fmt.Sprintf(format, args...), "\n")
	line := fmt.Sprintf("%s [%8.3f] %s%s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000Z"), Uptime().Seconds(), l.prefix, msg)
	l.mu.Lock()
	defer l.mu.Unlock()
	io.WriteString(l.w, line)
}

// Uptime is the time since the kernel booted (CLOCK_BOOTTIME).
func Uptime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
