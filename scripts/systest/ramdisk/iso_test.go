package ramdisk_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/lib/mqttbroker"
	"github.com/bmedge/bmedge/protocol"
)

// isoBroker is the test's MQTT broker (the coordinator's, on loopback):
// it lets in only the one credential of the boot under test and records
// every attempt and every hello.
type isoBroker struct {
	user, password string
	mu             sync.Mutex
	attempts       []string // "user clientID ok|refused"
	hellos         chan *protocol.Message
}

func (b *isoBroker) Authenticate(user, password, clientID string) error {
	ok := user == b.user && password == b.password && clientID == "ramdisk-"+strings.TrimPrefix(user, "node:")
	b.mu.Lock()
	b.attempts = append(b.attempts, fmt.Sprintf("%s %s %v", user, clientID, ok))
	b.mu.Unlock()
	if !ok {
		return errors.New("not this boot's credential")
	}
	return nil
}

func (b *isoBroker) Prefix(string) (string, bool) { return "", true }

func (b *isoBroker) Attempts() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.attempts...)
}

func startISOBroker(t *testing.T, user, password string) (*isoBroker, int) {
	t.Helper()
	b := &isoBroker{user: user, password: password, hellos: make(chan *protocol.Message, 16)}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	br, err := mqttbroker.Start(mqttbroker.Config{Addr: "127.0.0.1:0"}, b, log, map[string]mqttbroker.Handler{
		protocol.TopicPrefix + "/#": func(topic string, payload []byte) {
			if m, err := protocol.Decode(payload); err == nil && m.Kind == protocol.KindHello {
				select {
				case b.hellos <- m:
				default:
				}
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.Close() })
	_, port, _ := net.SplitHostPort(br.Addr)
	var p int
	fmt.Sscan(port, &p)
	return b, p
}

// bootISO boots the ramdisk ISO in QEMU as a BMC's virtual media would
// present it: no -kernel, the ISO as a USB CD-ROM and the parameters
// medium (none if params is "") as a read-only USB stick, both on an xHCI
// controller (usbCD); firmware is "" for SeaBIOS or an OVMF image. It
// returns the console log path and a channel closed when QEMU exits (the
// guest rebooted or powered off: -no-reboot).
func bootISO(t *testing.T, iso, params, firmware string) (string, <-chan struct{}) {
	t.Helper()
	return startVM(t, vmSpec{Firmware: firmware, Args: append(usbCD(t, iso, params),
		"-device", "virtio-rng-pci", "-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0")})
}

// TestQEMURamdiskISO boots the ramdisk ISO the way a BMC's virtual media
// does (no -kernel: the firmware boots the USB CD-ROM through GRUB), once
// under SeaBIOS and once under UEFI (OVMF), with this boot's parameters
// on a second USB medium: the agent finds them there and says hello to
// the test's broker with the node and the credential of the medium (the
// broker lets in nothing else). Then, two boots side by side: one whose
// medium holds a wrong password is refused by the broker and never says
// hello; one without a medium gives up after the agent's 60 s with a
// fatal error naming what it looked for, and reboots.
func TestQEMURamdiskISO(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU four times")
	}
	t.Parallel()
	iso := needISO(t)
	if _, err := os.Stat(ovmfFirmware); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("OVMF is missing (scripts/build-ramdisk.sh installs package ovmf): %v", err)
		}
		t.Skip("OVMF is missing; scripts/build-ramdisk.sh installs package ovmf")
	}
	const node = "8e1c6b7a-3f2d-4c5e-9a0b-1c2d3e4f5a6b"
	const password = "media-secret-0123456789"
	user := "node:" + node
	for _, c := range []struct {
		name, firmware, net string
	}{
		{"seabios", "", "bm.ip=10.0.2.15/24 bm.gw=10.0.2.2"},
		{"ovmf", ovmfFirmware, ""}, // DHCP
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, port := startISOBroker(t, user, password)
			params := fmt.Sprintf("bm.node=%s bm.site=lab bm.broker=mqtt://10.0.2.2:%d bm.user=%s bm.password=%s %s", node, port, user, password, c.net)
			start := time.Now()
			console, _ := bootISO(t, iso, params, c.firmware)
			select {
			case m := <-b.hellos:
				if m.Node != node || m.Site != "lab" {
					t.Fatalf("hello from site %q node %q, want lab %s", m.Site, m.Node, node)
				}
				t.Logf("%s: hello from node %s after %.1fs (the broker let it in: %s)", c.name, m.Node, time.Since(start).Seconds(), b.Attempts()[0])
			case <-time.After(5 * time.Minute):
				t.Fatalf("no hello after 5 minutes; broker attempts: %v", b.Attempts())
			}
			con, _ := os.ReadFile(console)
			// GRUB booted the generic command line; the parameters came
			// from the USB stick; the password never reached the console.
			for _, want := range []string{"no bm.node on the kernel command line", "boot parameters medium /dev/sd", "bm.password=<redacted>", "connected to mqtt://10.0.2.2:"} {
				if !bytes.Contains(con, []byte(want)) {
					t.Fatalf("the console does not say %q:\n%s", want, tail(con, 4096))
				}
			}
			if bytes.Contains(con, []byte(password)) {
				t.Fatalf("the console shows the broker password")
			}
			if m := regexp.MustCompile(`parameters medium (/dev/\S+) \(`).FindSubmatch(con); m != nil {
				t.Logf("the parameters medium was %s", m[1])
			}
		})
	}
	t.Run("refused", func(t *testing.T) {
		t.Parallel()
		t.Run("wrong password", func(t *testing.T) { t.Parallel(); isoWrongPassword(t, iso, node, user, password) })
		t.Run("no parameters medium", func(t *testing.T) { t.Parallel(); isoNoMedium(t, iso) })
	})
}

// isoWrongPassword: a medium with a wrong password; the broker refuses
// the ramdisk, which never says hello.
func isoWrongPassword(t *testing.T, iso, node, user, password string) {
	b, port := startISOBroker(t, user, password)
	params := fmt.Sprintf("bm.node=%s bm.site=lab bm.broker=mqtt://10.0.2.2:%d bm.user=%s bm.password=not-%s bm.ip=10.0.2.15/24", node, port, user, password)
	console, _ := bootISO(t, iso, params, "")
	deadline := time.Now().Add(5 * time.Minute)
	for {
		select {
		case m := <-b.hellos:
			t.Fatalf("a hello with a wrong password: %+v", m)
		case <-time.After(500 * time.Millisecond):
		}
		if a := b.Attempts(); len(a) > 0 {
			if a[0] != user+" ramdisk-"+node+" false" {
				t.Fatalf("broker attempts %v", a)
			}
			t.Logf("the broker refused %s", a[0])
			return
		}
		if time.Now().After(deadline) {
			con, _ := os.ReadFile(console)
			t.Fatalf("the ramdisk never tried the broker:\n%s", tail(con, 4096))
		}
	}
}

// isoNoMedium: no parameters medium; after its 60 s the agent says what
// it looked for and on which devices, and reboots (QEMU exits).
func isoNoMedium(t *testing.T, iso string) {
	start := time.Now()
	console, exited := bootISO(t, iso, "", "")
	select {
	case <-exited:
	case <-time.After(6 * time.Minute):
		con, _ := os.ReadFile(console)
		t.Fatalf("the VM is still running after 6 minutes:\n%s", tail(con, 4096))
	}
	con, _ := os.ReadFile(console)
	for _, want := range []string{"no boot parameters medium yet after", "bmramdisk: FATAL: no bm.node on the kernel command line and no boot parameters medium (ISO9660 volume BMPARAMS holding BMPARAMS.TXT) after 1m0s; block devices: ", "sr0 (not a parameters medium)", "rebooting in 5s"} {
		if !bytes.Contains(con, []byte(want)) {
			t.Fatalf("the console does not say %q:\n%s", want, tail(con, 4096))
		}
	}
	t.Logf("without a medium the VM rebooted after %.1fs: %s", time.Since(start).Seconds(), regexp.MustCompile(`FATAL: [^\n]*`).Find(con))
}
