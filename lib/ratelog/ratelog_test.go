package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestOneLinePerKindPerInterval(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	l := NewWithClock(slog.New(slog.NewTextHandler(&buf, nil)), 10*time.Second, func() time.Time { return now })
	for i := 0; i < 2000; i++ {
		l.Warn("bad-login", "login refused", "remote", "127.0.0.2")
		l.Warn("over-budget", "connection refused")
		now = now.Add(time.Millisecond) // 2 s in all
	}
	if got := strings.Count(buf.String(), "\n"); got != 2 {
		t.Fatalf("2000 refusals of 2 kinds within one interval wrote %d lines, want 2:\n%s", got, buf.String())
	}
	if n := l.Suppressed("bad-login"); n != 1999 {
		t.Fatalf("suppressed = %d, want 1999", n)
	}
	now = now.Add(10 * time.Second)
	if !l.Warn("bad-login", "login refused") {
		t.Fatal("the first refusal after the interval was not written")
	}
	last := buf.String()[strings.LastIndex(strings.TrimSuffix(buf.String(), "\n"), "\n")+1:]
	if !strings.Contains(last, "suppressed=1999") {
		t.Fatalf("the line after the interval does not carry the count left out: %q", last)
	}
	if l.Suppressed("bad-login") != 0 {
		t.Fatal("the count was not reset once written")
	}
}

func TestNilLimiterIsSilent(t *testing.T) {
	var l *Limiter
	if l.Warn("x", "y") {
		t.Fatal("a nil limiter wrote")
	}
}
