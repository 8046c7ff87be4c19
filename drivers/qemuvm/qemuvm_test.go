package qemuvm_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/consoletest"
	"github.com/bmedge/bmedge/drivers/qemuvm"
	"github.com/bmedge/bmedge/protocol"
)

// The serial port as a unix socket, with the log file kept: one boot of
// the project's ramdisk kernel with consoletest's guest init; a command typed on
// the socket runs, and its output reaches both the socket and the log.
func TestSerialSocket(t *testing.T) {
	qemu, err := exec.LookPath("qemu-system-x86_64")
	consoletest.Need(t, "qemu-system-x86_64 (Debian qemu-system-x86)", err)
	kernel, initrd := consoletest.Guest(t)
	tmp, err := os.MkdirTemp("", "qvm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	disk := filepath.Join(tmp, "disk.raw")
	os.WriteFile(disk, make([]byte, 1<<20), 0o644)
	log, sock := filepath.Join(tmp, "console.log"), filepath.Join(tmp, "serial.sock")
	b := qemuvm.New(qemuvm.Config{QEMU: qemu, Kernel: kernel, Initrd: initrd, Disk: disk, Serial: "D0", MemoryMB: 512, CPUs: 1,
		Console: log, SerialSocket: sock, Cmdline: func() string { return "rdinit=/init no_timer_check" }})
	t.Cleanup(b.Close)
	ctx := context.Background()
	if err := b.SetBootDevice(ctx, protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPower(ctx, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	var c net.Conn
	for end := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if c, err = net.Dial("unix", sock); err == nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("serial socket: %v", err)
		}
	}
	defer c.Close()
	var mu sync.Mutex
	var got bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			mu.Lock()
			got.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	start := time.Now()
	for end, next := time.Now().Add(4*time.Minute), time.Now(); ; time.Sleep(100 * time.Millisecond) {
		mu.Lock()
		ok := strings.Contains(got.String(), "qvmmarker7")
		mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("no output of the typed command on the socket; got %q", got.String())
		}
		if time.Now().After(next) {
			c.Write([]byte("echo qvm''marker7\r"))
			next = time.Now().Add(3 * time.Second)
		}
	}
	t.Logf("power-on to the typed command's output: %s", time.Since(start).Round(time.Second))
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		l, _ := os.ReadFile(log)
		if bytes.Contains(l, []byte("qvmmarker7")) {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("console.log lacks the command's output: %q", l)
		}
	}
}
