package consoletest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// GuestInit is what the console tests' guest prints when its init runs.
const GuestInit = "Run /init as init process"

// GuestReady is what the guest's init prints once it reads the console.
const GuestReady = "consoletest: reading the console"

// GuestLogin is the guest's login prompt, printed after GuestReady.
const GuestLogin = "bmedge-guest login: "

// Guest returns a kernel and an initramfs for a console test's VM: the
// project's ramdisk kernel, uncompressed (build/ramdisk/vmlinux, booted
// by its PVH entry: under TCG a bzImage spends ~5 CPU-seconds
// decompressing itself), and an initramfs holding only a small init built
// here. The init prints GuestReady and a login prompt (GuestLogin), then
// reads the console line by line and answers "echo ARGS" with ARGS, its
// single quotes removed, as a shell does: a typed "echo a”b" shows "ab"
// only if the guest ran it, where the terminal's echo of the typed line
// shows "a”b". Any other first line is taken as a login: the guest
// answers "Welcome, NAME" (quotes removed likewise) and a "> " prompt.
// The kernel's boot messages come first, as on any server. Boot with
// GuestCmdline.
// GuestCmdline is the guest's kernel command line. no_timer_check skips
// the kernel's check of the timer interrupt: under TCG at load 20 one
// boot stopped there (a trace from x86_late_time_init); the check proves
// nothing about a console.
const GuestCmdline = "console=ttyS0 rdinit=/init panic=-1 no_timer_check"

func Guest(t *testing.T) (kernel, initrd string) {
	t.Helper()
	dir := os.Getenv("BM_RAMDISK_DIR")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "../../build/ramdisk")
	}
	kernel = filepath.Join(dir, "vmlinux")
	_, err := os.Stat(kernel)
	Need(t, "the ramdisk's kernel (make ramdisk)", err)
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	tmp := t.TempDir()
	src := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(src, []byte(guestInitSource), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "init")
	build := exec.Command(goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "main.go")
	build.Dir = tmp
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64", "GO111MODULE=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the guest's init: %v\n%s", err, out)
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	initrd = filepath.Join(tmp, "initramfs.cpio")
	if err := os.WriteFile(initrd, newc("init", b), 0o644); err != nil {
		t.Fatal(err)
	}
	return kernel, initrd
}

// newc is a cpio archive (newc, as the kernel unpacks an initramfs) of
// one executable file.
func newc(name string, data []byte) []byte {
	var b bytes.Buffer
	pad := func() {
		for b.Len()%4 != 0 {
			b.WriteByte(0)
		}
	}
	entry := func(ino int, mode uint32, name string, data []byte) {
		fmt.Fprintf(&b, "070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x", ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		b.WriteString(name)
		b.WriteByte(0)
		pad()
		b.Write(data)
		pad()
	}
	entry(1, 0o100755, name, data)
	entry(0, 0, "TRAILER!!!", nil)
	return b.Bytes()
}

// guestInitSource is the guest's init: the console in the kernel's
// canonical mode (its echo, CR as end of line), one line at a time.
const guestInitSource = `package main

import (
	"bufio"
	"os"
	"strings"
	"syscall"
)

func main() {
	os.Mkdir("/dev", 0o755)
	syscall.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	con, err := os.OpenFile("/dev/console", os.O_RDWR, 0)
	if err != nil {
		syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
	}
	con.WriteString("\n` + GuestReady + `\n` + GuestLogin + `")
	sc := bufio.NewScanner(con)
	login := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if args, ok := strings.CutPrefix(line, "echo "); ok {
			con.WriteString(strings.ReplaceAll(args, "'", "") + "\n")
		} else if !login && line != "" {
			login = true
			con.WriteString("Welcome, " + strings.ReplaceAll(line, "'", "") + "\n")
		}
		if login {
			con.WriteString("> ")
		} else {
			con.WriteString("` + GuestLogin + `")
		}
	}
	syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF)
}
`
