package console

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// SimDialer opens the console of a simulated node (driver fake): it
// prints a plausible boot log and a login prompt, echoes what is typed,
// and answers a typed line: a login name asks for a password, and once
// logged in (any password) the shell knows a few commands, among them
// "ticks N" (print N numbered lines, one every 0.2 s) and "exit".
type SimDialer struct {
	// LineDelay is the pause between boot log lines (0: 20 ms).
	LineDelay time.Duration
}

// Dial starts the simulated console.
func (d SimDialer) Dial(ctx context.Context, t Target) (io.ReadWriteCloser, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	delay := d.LineDelay
	if delay == 0 {
		delay = 20 * time.Millisecond
	}
	pr, pw := io.Pipe()
	s := &simConsole{node: t.Node, out: pw, pr: pr, in: make(chan []byte, 64), done: make(chan struct{})}
	go s.run(delay)
	return s, nil
}

type simConsole struct {
	node string
	out  *io.PipeWriter
	pr   *io.PipeReader
	in   chan []byte
	done chan struct{}
	once sync.Once
	mu   sync.Mutex
}

func (s *simConsole) Read(p []byte) (int, error) { return s.pr.Read(p) }

func (s *simConsole) Write(p []byte) (int, error) {
	select {
	case <-s.done:
		return 0, io.ErrClosedPipe
	case s.in <- append([]byte(nil), p...):
		return len(p), nil
	}
}

func (s *simConsole) Close() error {
	s.once.Do(func() { close(s.done); s.pr.Close(); s.out.Close() })
	return nil
}

func (s *simConsole) print(f string, a ...any) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := fmt.Fprintf(s.out, f, a...)
	return err == nil
}

// SimBootLog is the boot log the simulated console prints first.
var SimBootLog = []string{
	"[    0.000000] Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0) #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1",
	"[    0.000000] Command line: BOOT_IMAGE=/boot/vmlinuz-6.1.0-28-amd64 root=UUID=0f3c2a4e-5b1d-4c6a-9e0f-2d7b8a1c3e5f ro console=ttyS0,115200n8",
	"[    0.004512] DMI: Simulated Machine/bmedge-sim, BIOS 1.0 01/01/2026",
	"[    0.251031] smpboot: CPU0: Intel(R) Xeon(R) CPU (family: 0x6, model: 0x55)",
	"[    1.102948] Serial: 8250/16550 driver, 4 ports, IRQ sharing enabled",
	"[    1.103622] 00:04: ttyS0 at I/O 0x3f8 (irq = 4, base_baud = 115200) is a 16550A",
	"[    2.418330] EXT4-fs (sda1): mounted filesystem with ordered data mode. Quota mode: none.",
	"[    3.002114] systemd[1]: Detected architecture x86-64.",
	"[  OK  ] Started systemd-journald.service - Journal Service.",
	"[  OK  ] Reached target network-online.target - Network is Online.",
	"[  OK  ] Started ssh.service - OpenBSD Secure Shell server.",
	"[  OK  ] Started serial-getty@ttyS0.service - Serial Getty on ttyS0.",
	"",
	"Debian GNU/Linux 12 %s ttyS0",
	"",
}

func (s *simConsole) run(delay time.Duration) {
	defer s.Close()
	for _, l := range SimBootLog {
		if strings.Contains(l, "%s") {
			l = fmt.Sprintf(l, s.node)
		}
		if !s.print("%s\r\n", l) {
			return
		}
		select {
		case <-s.done:
			return
		case <-time.After(delay):
		}
	}
	prompt := func(state, user string) string {
		switch state {
		case "login":
			return s.node + " login: "
		case "password":
			return "Password: "
		}
		return user + "@" + s.node + ":~# "
	}
	state, user := "login", ""
	s.print("%s", prompt(state, user))
	var line []byte
	for {
		var b []byte
		select {
		case <-s.done:
			return
		case b = <-s.in:
		}
		for _, c := range b {
			switch c {
			case '\r', '\n':
				s.print("\r\n")
				state, user = s.answer(state, user, string(line))
				line = line[:0]
				s.print("%s", prompt(state, user))
			case 0x7f, 0x08:
				if len(line) > 0 {
					line = line[:len(line)-1]
					s.print("\b \b")
				}
			case 0x03: // ^C
				line = line[:0]
				s.print("^C\r\n%s", prompt(state, user))
			default:
				if len(line) < 1024 {
					line = append(line, c)
				}
				if state != "password" {
					s.print("%c", c)
				}
			}
		}
	}
}

// answer reacts to a typed line and says the next state.
func (s *simConsole) answer(state, user, line string) (string, string) {
	line = strings.TrimSpace(line)
	switch state {
	case "login":
		if line == "" {
			return "login", ""
		}
		return "password", line
	case "password":
		s.print("Linux %s 6.1.0-28-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 x86_64\r\n", s.node)
		return "shell", user
	}
	f := strings.Fields(line)
	if len(f) == 0 {
		return state, user
	}
	switch f[0] {
	case "exit", "logout":
		s.print("logout\r\n\r\n")
		return "login", ""
	case "hostname":
		s.print("%s\r\n", s.node)
	case "whoami":
		s.print("%s\r\n", user)
	case "echo":
		s.print("%s\r\n", strings.Join(f[1:], " "))
	case "uname":
		s.print("Linux\r\n")
	case "ticks":
		n := 10
		if len(f) > 1 {
			fmt.Sscan(f[1], &n)
		}
		n = min(max(n, 1), 10000)
		go func() {
			for i := 1; i <= n; i++ {
				select {
				case <-s.done:
					return
				case <-time.After(200 * time.Millisecond):
				}
				s.print("tick %d of %d\r\n", i, n)
			}
		}()
	default:
		s.print("-bash: %s: command not found\r\n", f[0])
	}
	return state, user
}
