package sol_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/consoletest"
	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/drivers/ipmi/sol"
	"github.com/bmedge/bmedge/lib/freeport"
)

func freeTCPPort(t *testing.T) int {
	addr, err := freeport.Addr("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	return port
}

// One boot of the project's ramdisk kernel (with consoletest's guest init,
// so that a typed line runs) whose serial port ipmi_sim serves as SOL; QEMU is the
// chassis' power-on command. SOL is activated before power-on: the
// session gives the kernel's boot messages, a typed command runs on the
// VM, a second activation is refused as busy, Close frees the payload.
// A wrong password and an unknown user are refused with what to do.
func TestDialIPMISimQEMU(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	consoletest.Need(t, "qemu-system-x86_64 (Debian qemu-system-x86)", err)
	kernel, initrd := consoletest.Guest(t)
	// QEMU waits (wait=on) for ipmi_sim to connect to its serial port
	// before it starts the VM, so that no boot message is lost: ipmi_sim
	// retries its connection only every few seconds.
	serial := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	powerOn := fmt.Sprintf("exec %s -m 512 -nographic -display none -monitor none -no-reboot -nodefaults "+
		"-serial tcp:%s,server=on,wait=on -kernel %s -initrd %s -append '"+consoletest.GuestCmdline+"'",
		qemu, serial, kernel, initrd)
	s := ipmisim.StartTest(t, ipmisim.Options{SOL: serial, PowerOn: powerOn, Users: []ipmisim.User{{Name: "admin", Password: "sol-pw-1", Priv: "admin"}}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	_, err = sol.Dial(ctx, s.Addr(), "admin", "wrong")
	if !errors.Is(err, sol.ErrRefused) || !strings.Contains(err.Error(), "wrong password") {
		t.Fatalf("wrong password: %v; want ErrRefused saying so", err)
	}
	_, err = sol.Dial(ctx, s.Addr(), "nobody", "sol-pw-1")
	if !errors.Is(err, sol.ErrRefused) || !strings.Contains(err.Error(), "no such user") {
		t.Fatalf("unknown user: %v; want ErrRefused saying so", err)
	}

	c, err := sol.Dial(ctx, s.Addr(), "admin", "sol-pw-1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := consoletest.Collect(c)
	// The payload is held: another activation is refused as busy.
	if _, err := sol.Dial(ctx, s.Addr(), "admin", "sol-pw-1"); !errors.Is(err, sol.ErrSOLUnavailable) || !strings.Contains(err.Error(), "already active") {
		t.Fatalf("second activation: %v; want ErrSOLUnavailable, already active", err)
	}

	start := time.Now()
	if _, err := s.Ipmitool("chassis", "power", "on"); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, "Linux version", 3*time.Minute, nil)
	out.WaitFor(t, consoletest.GuestReady, 3*time.Minute, nil)
	// The command's output has the quotes removed, which the terminal's
	// echo of the typed line does not.
	out.WaitFor(t, "solmarker42", 3*time.Minute, func() { _, _ = io.WriteString(c, "echo sol''marker42\r") })
	t.Logf("power-on to a typed command's output: %s", time.Since(start).Round(time.Second))

	// Close deactivates the payload: activating again works at once.
	c.Close()
	c2, err := sol.Dial(ctx, s.Addr(), "admin", "sol-pw-1")
	if err != nil {
		t.Fatalf("SOL after Close: %v", err)
	}
	c2.Close()
}
