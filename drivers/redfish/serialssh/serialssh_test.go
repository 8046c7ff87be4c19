package serialssh_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/drivers/consoletest"
	"github.com/bmedge/bmedge/drivers/redfish/serialssh"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// sshCLI runs Debian's OpenSSH client (through sshpass, the password in
// the environment) against the console: the independent client.
func sshCLI(t *testing.T, addr, user, password string, cmd ...string) (string, error) {
	host, port, _ := net.SplitHostPort(addr)
	args := append([]string{"-e", "ssh", "-p", port, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-o", "PreferredAuthentications=password,keyboard-interactive", "-o", "PubkeyAuthentication=no", "-o", "NumberOfPasswordPrompts=1",
		"-o", "ConnectTimeout=30", "-T", user + "@" + host}, cmd...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := exec.CommandContext(ctx, "sshpass", args...)
	c.Env = append(os.Environ(), "SSHPASS="+password)
	out, err := c.CombinedOutput()
	return string(out), err
}

// One boot of the project's ramdisk kernel behind the virtual Redfish BMC
// (consoletest's guest init, so that a typed line runs): the SSH console gives
// the kernel's boot messages from power-on, a typed command runs on the
// VM, the console.log file still gets everything, the Manager advertises
// the console's port, and only the BMC's user gets in.
func TestDialVBMCConsole(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	consoletest.Need(t, "qemu-system-x86_64 (Debian qemu-system-x86)", err)
	_, err = exec.LookPath("sshpass")
	consoletest.Need(t, "sshpass and ssh (Debian sshpass, openssh-client)", err)
	kernel, initrd := consoletest.Guest(t)

	dir, err := os.MkdirTemp("", "sshc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	m, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{QEMU: qemu, Dir: dir, MemoryMB: 512, GracefulTimeout: time.Second,
		ExtraArgs: []string{"-kernel", kernel, "-initrd", initrd, "-append", consoletest.GuestCmdline, "-no-reboot"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx := context.Background()
	if err := m.SetBoot(ctx, vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeLegacy}); err != nil {
		t.Fatal(err)
	}
	const user, password = "root", "calvin-7f3a"
	b, err := vbmc.New(vbmc.Config{Username: user, Password: password, Systems: []vbmc.SystemConfig{{Machine: m}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	con, err := b.ServeSSHConsole(vbmc.SSHConsoleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { con.Close() })

	// The Manager advertises the console as a real BMC does.
	_, port, _ := net.SplitHostPort(con.Addr)
	sc := managerSerialConsole(t, srv.URL, user, password)
	if ssh, _ := sc["SSH"].(map[string]any); sc["ServiceEnabled"] != true || ssh["Port"] != mustFloat(port) || ssh["ConsoleEntryCommand"] != "console com2" {
		t.Fatalf("Manager SerialConsole: %v, want SSH on port %s", sc, port)
	}

	// Refusals, with OpenSSH: a wrong password, and anyone but the BMC's
	// user with the right one. The same client gets in with the BMC's
	// account (and is told the command is unknown), so the refusals are
	// the server's.
	if out, err := sshCLI(t, con.Addr, user, password, "help"); err == nil || !strings.Contains(out, "unknown command") {
		t.Fatalf("ssh as the BMC's user: %v, %q; want the prompt's unknown command", err, out)
	}
	for _, c := range []struct{ user, password string }{{user, "wrong"}, {"admin", password}, {"nobody", password}} {
		if out, err := sshCLI(t, con.Addr, c.user, c.password, "console", "com2"); err == nil || !strings.Contains(out, "Permission denied") {
			t.Fatalf("ssh as %q with password %q: %v, %q; want Permission denied", c.user, c.password, err, out)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := serialssh.Dial(dctx, con.Addr, user, "wrong", ssh.FixedHostKey(con.HostKey)); !errors.Is(err, serialssh.ErrRefused) {
		t.Fatalf("Dial with a wrong password: %v, want ErrRefused", err)
	}
	if _, err := serialssh.Dial(dctx, con.Addr, user, password, ssh.FixedHostKey(otherKey(t))); err == nil {
		t.Fatal("Dial accepted a host key that is not the BMC's")
	}

	// Attached before power-on: the console waits for the machine.
	c, err := serialssh.Dial(dctx, con.Addr, user, password, ssh.FixedHostKey(con.HostKey))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := consoletest.Collect(c)
	out.WaitFor(t, "Connected to the serial console", 30*time.Second, nil)
	start := time.Now()
	if err := m.Power(ctx, vbmc.ResetOn); err != nil {
		t.Fatal(err)
	}
	out.WaitFor(t, "Linux version", 3*time.Minute, nil)
	out.WaitFor(t, consoletest.GuestReady, 3*time.Minute, nil)
	// A typed command runs on the VM: its output has the quotes removed,
	// which the terminal's echo of the line does not.
	out.WaitFor(t, "sshmarker42", 3*time.Minute, func() { _, _ = io.WriteString(c, "echo ssh''marker42\r") })
	t.Logf("boot to a typed command's output: %s", time.Since(start).Round(time.Second))

	// A second session is told the console is busy (OpenSSH again).
	if o, _ := sshCLI(t, con.Addr, user, password, "console", "com2"); !strings.Contains(o, "in use by another session") {
		t.Fatalf("second console session: %q; want busy", o)
	}
	// console.log keeps the whole output too.
	log, _ := os.ReadFile(filepath.Join(dir, "console.log"))
	if !strings.Contains(string(log), "Linux version") || !strings.Contains(string(log), "sshmarker42") {
		t.Fatalf("console.log lacks the boot messages or the typed command's output (%d bytes)", len(log))
	}

	// Close leaves the console: another session attaches at once.
	c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		// A dial of its own time: the boot above may have taken longer
		// than the first dials' minute on a loaded machine.
		d2ctx, d2cancel := context.WithTimeout(ctx, time.Minute)
		c2, err := serialssh.Dial(d2ctx, con.Addr, user, password, ssh.FixedHostKey(con.HostKey))
		d2cancel()
		if err != nil {
			t.Fatal(err)
		}
		o := consoletest.Collect(c2)
		time.Sleep(time.Second)
		s := o.String()
		c2.Close()
		if strings.Contains(s, "Connected to the serial console") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close the console stays busy: %q", s)
		}
	}
}

func mustFloat(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }

func otherKey(t *testing.T) ssh.PublicKey {
	k, _, _, _, err := ssh.ParseAuthorizedKey([]byte("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGdsBJlTcXdtXHNmdaWmKU07rm2Z4xoNvR20OwpSlD+b other"))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func managerSerialConsole(t *testing.T, base, user, password string) map[string]any {
	get := func(path string) map[string]any {
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.SetBasicAuth(user, password)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return v
	}
	ms, _ := get("/redfish/v1/Managers")["Members"].([]any)
	if len(ms) == 0 {
		t.Fatal("no Managers")
	}
	id, _ := ms[0].(map[string]any)["@odata.id"].(string)
	sc, _ := get(id)["SerialConsole"].(map[string]any)
	return sc
}
