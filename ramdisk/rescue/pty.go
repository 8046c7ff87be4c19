package rescue

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ptyPair is a pseudo-terminal: ptm the master side, tty the terminal.
type ptyPair struct {
	ptm, tty *os.File
}

func openPty() (*ptyPair, error) {
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	fd := int(ptm.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		ptm.Close()
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	// TIOCGPTPEER opens the terminal of this very master, whichever
	// devpts instance /dev/ptmx belongs to (a path under /dev/pts may
	// name another instance's terminal).
	tfd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno == 0 {
		return &ptyPair{ptm: ptm, tty: os.NewFile(tfd, "pty")}, nil
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		ptm.Close()
		return nil, fmt.Errorf("pty number: %w", err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		ptm.Close()
		return nil, err
	}
	return &ptyPair{ptm: ptm, tty: tty}, nil
}

func (p *ptyPair) resize(cols, rows uint32) {
	if cols == 0 || rows == 0 || cols > 10000 || rows > 10000 {
		return
	}
	_ = unix.IoctlSetWinsize(int(p.ptm.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)})
}

func (p *ptyPair) Close() {
	p.ptm.Close()
	if p.tty != nil {
		p.tty.Close()
	}
}
