package rescue

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ConsoleDevice is the terminal of the last console= of a kernel command
// line (the one the kernel's /dev/console is), e.g. /dev/ttyS0; it is
// /dev/console when there is none.
func ConsoleDevice(cmdline string) string {
	dev := ""
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, "console="); ok {
			name, _, _ := strings.Cut(v, ",")
			if name != "" && !strings.ContainsAny(name, "/.") {
				dev = name
			}
		}
	}
	if dev == "" {
		return "/dev/console"
	}
	return "/dev/" + dev
}

// Console runs a login prompt on the terminal at path until ctx ends: a
// user name and a password (not echoed) checked as an SSH login is, then
// the shell on that terminal; the prompt comes back when it exits.
func (s *Server) Console(ctx context.Context, path string) error {
	for ctx.Err() == nil {
		if err := s.consoleOnce(ctx, path); err != nil {
			return err
		}
		// No hot loop on a console that reads nothing.
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return ctx.Err()
}

func (s *Server) consoleOnce(ctx context.Context, path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { f.Close() })
	defer stop()
	defer f.Close()
	fd := int(f.Fd())
	saved, terr := unix.IoctlGetTermios(fd, unix.TCGETS)
	echo := func(on bool) {
		if terr != nil {
			return
		}
		t := *saved
		t.Lflag |= unix.ICANON
		if on {
			t.Lflag |= unix.ECHO
		} else {
			t.Lflag &^= unix.ECHO
		}
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, &t)
	}
	if !s.consoleLogin(f, echo) {
		return nil
	}
	release, ok := s.AcquireSession()
	if !ok {
		fmt.Fprintf(f, "at most %d rescue sessions at once\r\n", s.MaxSessions())
		return nil
	}
	defer release()
	cmd := exec.Command(s.cfg.Shell)
	cmd.Dir = "/"
	cmd.Env = append(append([]string{}, s.cfg.Env...), "TERM=vt100")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		// Not every console can become a controlling terminal.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(f, "cannot start %s: %v\r\n", s.cfg.Shell, err)
			return nil
		}
	}
	stopShell := context.AfterFunc(ctx, func() { _ = cmd.Process.Kill() })
	defer stopShell()
	_ = cmd.Wait()
	return nil
}

// consoleLogin asks for a user name and a password on rw (echo turns the
// terminal's echo on and off) and says whether they are the rescue
// login's; an empty user name or a wrong login says false.
func (s *Server) consoleLogin(rw io.ReadWriter, echo func(bool)) bool {
	r := bufio.NewReaderSize(rw, 512)
	readLine := func() (string, bool) {
		var b []byte
		for {
			c, err := r.ReadByte()
			if err != nil {
				return "", false
			}
			if c == '\n' || c == '\r' {
				return string(b), true
			}
			if len(b) < 512 {
				b = append(b, c)
			}
		}
	}
	echo(true)
	fmt.Fprint(rw, "\r\nbmedge rescue login: ")
	user, ok := readLine()
	user = strings.TrimSpace(user)
	if !ok || user == "" {
		return false
	}
	echo(false)
	fmt.Fprint(rw, "Password: ")
	pw, ok := readLine()
	echo(true)
	fmt.Fprint(rw, "\r\n")
	if !ok {
		return false
	}
	if err := s.Check(user, pw); err != nil {
		fmt.Fprint(rw, "Login incorrect\r\n")
		return false
	}
	return true
}
