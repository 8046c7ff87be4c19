package vbmc_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// The test binary doubles as a fake qemu-system-x86_64 when
// VBMC_FAKE_QEMU_LOG is set: it serves QMP on the -qmp socket, records
// its command line and every QMP command in that log, exits on quit,
// and on system_powerdown after a short while, as a guest that powers
// off. VBMC_FAKE_QEMU_FAIL makes it exit at once with an error.
func TestMain(m *testing.M) {
	if log := os.Getenv("VBMC_FAKE_QEMU_LOG"); log != "" {
		os.Exit(fakeQEMU(log, os.Args[1:]))
	}
	os.Exit(m.Run())
}

type fakeEntry struct {
	Args []string       `json:"args,omitempty"`
	Cmd  string         `json:"cmd,omitempty"`
	Arg  map[string]any `json:"arguments,omitempty"`
}

func fakeQEMU(logPath string, args []string) int {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 2
	}
	record := func(e fakeEntry) {
		b, _ := json.Marshal(e)
		f.Write(append(b, '\n'))
	}
	record(fakeEntry{Args: args})
	if os.Getenv("VBMC_FAKE_QEMU_FAIL") != "" {
		fmt.Fprintln(os.Stderr, "qemu-system-x86_64: -drive if=none: fake failure for the test")
		return 1
	}
	var sock string
	for i, a := range args {
		if a == "-qmp" && i+1 < len(args) {
			sock = strings.TrimPrefix(strings.Split(args[i+1], ",")[0], "unix:")
		}
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	exit := make(chan int, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			w := bufio.NewWriter(c)
			send := func(v any) { b, _ := json.Marshal(v); w.Write(append(b, '\r', '\n')); w.Flush() }
			send(map[string]any{"QMP": map[string]any{"version": map[string]any{}, "capabilities": []string{}}})
			dec := json.NewDecoder(c)
			// The guest shuts down on the ACPI button: QEMU exits once
			// the QMP session that pressed it ends.
			powerdown := false
			for {
				var msg struct {
					Execute   string         `json:"execute"`
					Arguments map[string]any `json:"arguments"`
				}
				if dec.Decode(&msg) != nil {
					break
				}
				if msg.Execute != "qmp_capabilities" && msg.Execute != "query-status" {
					record(fakeEntry{Cmd: msg.Execute, Arg: msg.Arguments})
				}
				switch msg.Execute {
				case "qmp_capabilities", "system_reset", "blockdev-change-medium", "eject", "blockdev-add", "device_add", "device_del", "blockdev-del":
					// An event first, as QEMU interleaves them.
					send(map[string]any{"event": "RESET", "data": map[string]any{}})
					send(map[string]any{"return": map[string]any{}})
				case "query-status":
					send(map[string]any{"return": map[string]any{"status": "running", "running": true}})
				case "quit":
					send(map[string]any{"return": map[string]any{}})
					exit <- 0
				case "system_powerdown":
					send(map[string]any{"return": map[string]any{}})
					powerdown = true
				default:
					send(map[string]any{"error": map[string]any{"class": "CommandNotFound", "desc": "The command " + msg.Execute + " has not been found"}})
				}
			}
			c.Close()
			if powerdown {
				select {
				case exit <- 0:
				default:
				}
			}
		}
	}()
	code := <-exit
	ln.Close()
	return code
}

func readFakeLog(t *testing.T, path string) []fakeEntry {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []fakeEntry
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if line == "" {
			continue
		}
		var e fakeEntry
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("fake qemu log line %q: %v", line, err)
		}
		out = append(out, e)
	}
	return out
}

// summary turns the log into "start <boot device>" and "qmp <cmd>" items.
func summary(entries []fakeEntry) []string {
	var out []string
	for _, e := range entries {
		if e.Args != nil {
			dev := "?"
			for i, a := range e.Args {
				if a == "-device" && strings.Contains(e.Args[i+1], "bootindex=0") {
					dev = strings.Split(e.Args[i+1], ",")[0]
				}
			}
			out = append(out, "start "+dev)
			continue
		}
		out = append(out, "qmp "+e.Cmd)
	}
	return out
}

func shortDir(t *testing.T) string {
	t.Helper()
	// t.TempDir can be too long for a unix socket path.
	d, err := os.MkdirTemp("", "vbmc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestQEMUArgs(t *testing.T) {
	dir := shortDir(t)
	m, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{Dir: dir, Disk: "/images/d.raw", DiskSerial: "D0", MAC: "52:54:00:12:34:56",
		OVMF: filepath.Join(dir, "nothing.fd")})
	if err != nil {
		t.Fatal(err)
	}
	args, err := m.Args(vbmc.Boot{Device: vbmc.BootPxe, Mode: vbmc.ModeLegacy}, map[vbmc.Slot]string{vbmc.SlotCD: "/cache/x.iso", vbmc.SlotUSB: "/cache/p.img"})
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(args, " ")
	for _, want := range []string{
		"-qmp unix:" + dir + "/qmp.sock,server=on,wait=off",
		"-drive if=none,id=d0,file=/images/d.raw,format=raw -device virtio-blk-pci,drive=d0,bootindex=1,serial=D0",
		"-drive if=none,id=cd0,media=cdrom,readonly=on,format=raw,file=/cache/x.iso -device ide-cd,drive=cd0,id=cd,bootindex=2",
		"-netdev user,id=n0 -device virtio-net-pci,netdev=n0,bootindex=0,mac=52:54:00:12:34:56",
		"-device qemu-xhci,id=xhci -blockdev driver=raw,node-name=usb0,read-only=on,file.driver=file,file.filename=/cache/p.img,file.read-only=on -device usb-storage,drive=usb0,id=usbstick,removable=on,bus=xhci.0",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("command line lacks %q:\n%s", want, line)
		}
	}
	if strings.Contains(line, "-bios") {
		t.Errorf("Legacy boot uses OVMF: %s", line)
	}
	if _, err := m.Args(vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeUEFI}, nil); err == nil || !strings.Contains(err.Error(), "OVMF") {
		t.Errorf("UEFI without the firmware: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "nothing.fd"), []byte("fw"), 0o644)
	args, err = m.Args(vbmc.Boot{Device: vbmc.BootCd, Mode: vbmc.ModeUEFI}, nil)
	if err != nil {
		t.Fatal(err)
	}
	line = strings.Join(args, " ")
	if !strings.Contains(line, "-bios "+dir+"/nothing.fd") || !strings.Contains(line, "id=cd,bootindex=0") ||
		!strings.Contains(line, "if=none,id=cd0,media=cdrom,readonly=on -device") {
		t.Errorf("UEFI CD boot with an empty drive: %s", line)
	}
	if strings.Contains(line, "usb-storage") {
		t.Errorf("a USB stick without an image: %s", line)
	}
	m2, _ := vbmc.NewQEMUMachine(vbmc.QEMUConfig{Dir: dir, ExtraArgs: []string{"-vnc", ":0"}})
	if _, err := m2.Args(vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeLegacy}, nil); err == nil {
		t.Error("a VNC listener was allowed")
	}
}

// TestQEMUMachineThroughRedfish drives a QEMU machine (a fake QEMU that
// speaks QMP) through the vBMC's Redfish API and checks what QEMU was
// told: starts with the boot device first, system_reset, a new QEMU for
// a new boot device, ACPI power-down, media change and eject, quit.
func TestQEMUMachineThroughRedfish(t *testing.T) {
	dir := shortDir(t)
	log := filepath.Join(dir, "fake.log")
	t.Setenv("VBMC_FAKE_QEMU_LOG", log)
	iso := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/boot.iso" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("ISO IMAGE"))
	}))
	t.Cleanup(iso.Close)

	m, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{QEMU: os.Args[0], Dir: dir, Disk: filepath.Join(dir, "disk.raw"), GracefulTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	l := newLab(t, vbmc.Config{Systems: []vbmc.SystemConfig{{Machine: m, BootMode: vbmc.ModeLegacy}}})
	sys := "/redfish/v1/Systems/1"
	reset := func(rt string) {
		t.Helper()
		if r := l.call(t, "POST", sys+"/Actions/ComputerSystem.Reset", "basic", map[string]any{"ResetType": rt}); r.status != 204 {
			t.Fatalf("%s: %d %v", rt, r.status, r.body)
		}
	}
	waitPower := func(want string) {
		t.Helper()
		var r reply
		if !waitfor.Until(10*time.Second, func() bool { r = l.call(t, "GET", sys, "basic", nil); return r.body["PowerState"] == want }) {
			t.Fatalf("power state %v, want %s", r.body["PowerState"], want)
		}
	}
	cd := "/redfish/v1/Managers/BMC/VirtualMedia/CD/Actions/"

	reset("On")
	waitPower("On")
	if r := l.call(t, "POST", cd+"VirtualMedia.InsertMedia", "basic", map[string]any{"Image": iso.URL + "/boot.iso"}); r.status != 204 {
		t.Fatalf("insert: %d %v", r.status, r.body)
	}
	if r := l.call(t, "POST", cd+"VirtualMedia.EjectMedia", "basic", nil); r.status != 204 {
		t.Fatalf("eject: %d %v", r.status, r.body)
	}
	if r := l.call(t, "POST", cd+"VirtualMedia.InsertMedia", "basic", map[string]any{"Image": iso.URL + "/missing.iso"}); r.status != 400 || !strings.Contains(fmt.Sprint(r.body), "404") {
		t.Fatalf("insert of a missing image: %d %v", r.status, r.body)
	}
	if r := l.call(t, "POST", cd+"VirtualMedia.InsertMedia", "basic", map[string]any{"Image": iso.URL + "/boot.iso"}); r.status != 204 {
		t.Fatalf("insert: %d %v", r.status, r.body)
	}
	reset("ForceRestart")
	l.call(t, "PATCH", sys, "basic", map[string]any{"Boot": map[string]any{"BootSourceOverrideTarget": "Cd", "BootSourceOverrideEnabled": "Once"}})
	reset("ForceRestart")
	waitPower("On")
	reset("GracefulShutdown")
	waitPower("Off")
	reset("On")
	waitPower("On")
	reset("GracefulRestart")
	// The guest powers off, then the machine starts it again.
	waitfor.Until(10*time.Second, func() bool { return len(summary(readFakeLog(t, log))) >= 11 })
	waitPower("On")
	reset("ForceOff")
	waitPower("Off")

	got := summary(readFakeLog(t, log))
	want := []string{
		"start virtio-blk-pci",       // On, from the disk
		"qmp blockdev-change-medium", // insert while running
		"qmp eject",                  // eject
		"qmp blockdev-change-medium", // insert again (the missing image never reached QEMU)
		"qmp system_reset",           // ForceRestart, same boot device
		"qmp quit", "start ide-cd",   // ForceRestart with a Once override to the CD: a new QEMU
		"qmp system_powerdown", // GracefulShutdown; the guest powers off
		"start virtio-blk-pci", // On: the Once override was used
		"qmp system_powerdown", // GracefulRestart ...
		"start virtio-blk-pci", // ... and the start after the guest powered off
		"qmp quit",             // ForceOff
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("QEMU saw:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	entries := readFakeLog(t, log)
	var file string
	var cdStartHasMedia bool
	for _, e := range entries {
		if e.Cmd == "blockdev-change-medium" {
			file, _ = e.Arg["filename"].(string)
			if e.Arg["id"] != "cd" || e.Arg["format"] != "raw" {
				t.Errorf("blockdev-change-medium arguments: %v", e.Arg)
			}
		}
		if e.Args != nil && strings.Contains(strings.Join(e.Args, " "), "id=cd0,media=cdrom,readonly=on,format=raw,file=") {
			cdStartHasMedia = true
		}
	}
	if data, err := os.ReadFile(file); err != nil || string(data) != "ISO IMAGE" {
		t.Fatalf("the CD file %s holds %q (%v), want the fetched image", file, data, err)
	}
	if !cdStartHasMedia {
		t.Error("a QEMU started while media was inserted did not get it with -drive")
	}
}

func TestQEMUThatCannotStart(t *testing.T) {
	dir := shortDir(t)
	t.Setenv("VBMC_FAKE_QEMU_LOG", filepath.Join(dir, "fake.log"))
	t.Setenv("VBMC_FAKE_QEMU_FAIL", "1")
	m, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{QEMU: os.Args[0], Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	m.SetBoot(context.Background(), vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeLegacy})
	err = m.Power(context.Background(), vbmc.ResetOn)
	if err == nil || !strings.Contains(err.Error(), "fake failure for the test") {
		t.Fatalf("start of a QEMU that exits at once: %v; want qemu.log's last line", err)
	}
	if m.PoweredOn() {
		t.Fatal("machine reports on after a failed start")
	}
}

// TestRealQEMUAcceptsTheCommandLineAndQMP starts the real emulator
// paused (-S: nothing boots, nearly no CPU), attaches and ejects a CD
// over QMP and quits it, checking that this QEMU takes our command line
// and our QMP commands.
func TestRealQEMUAcceptsTheCommandLineAndQMP(t *testing.T) {
	q, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("qemu-system-x86_64 is missing; install qemu-system-x86")
		}
		t.Skip("qemu-system-x86_64 is missing")
	}
	dir := shortDir(t)
	os.WriteFile(filepath.Join(dir, "disk.raw"), make([]byte, 1<<20), 0o644)
	iso := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(make([]byte, 64<<10)) }))
	t.Cleanup(iso.Close)
	m, err := vbmc.NewQEMUMachine(vbmc.QEMUConfig{QEMU: q, Dir: dir, Disk: filepath.Join(dir, "disk.raw"), MemoryMB: 64, ExtraArgs: []string{"-S"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx := context.Background()
	m.SetBoot(ctx, vbmc.Boot{Device: vbmc.BootPxe, Mode: vbmc.ModeLegacy})
	if err := m.Power(ctx, vbmc.ResetOn); err != nil {
		t.Fatal(err)
	}
	if err := m.InsertMedia(ctx, vbmc.SlotCD, iso.URL+"/x.iso"); err != nil {
		t.Fatal(err)
	}
	// The USB stick is plugged in while the VM runs, replaced, pulled
	// out, and given to QEMU's command line at the next start.
	for i := 0; i < 2; i++ {
		if err := m.InsertMedia(ctx, vbmc.SlotUSB, iso.URL+"/p.img"); err != nil {
			t.Fatalf("USB stick, insert %d: %v", i+1, err)
		}
	}
	if err := m.EjectMedia(ctx, vbmc.SlotUSB); err != nil {
		t.Fatal(err)
	}
	if err := m.InsertMedia(ctx, vbmc.SlotUSB, iso.URL+"/p.img"); err != nil {
		t.Fatal(err)
	}
	if err := m.Power(ctx, vbmc.ResetPowerCycle); err != nil {
		t.Fatal(err)
	}
	if err := m.Power(ctx, vbmc.ResetForceRestart); err != nil {
		t.Fatal(err)
	}
	if err := m.EjectMedia(ctx, vbmc.SlotCD); err != nil {
		t.Fatal(err)
	}
	if err := m.EjectMedia(ctx, vbmc.SlotUSB); err != nil {
		t.Fatal(err)
	}
	if err := m.Power(ctx, vbmc.ResetForceOff); err != nil {
		t.Fatal(err)
	}
	if m.PoweredOn() {
		t.Fatal("QEMU still runs after ForceOff")
	}
}
