package boot

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// fakeMediaBMC is a BMC with virtual media: what is inserted, its power.
type fakeMediaBMC struct {
	mu        sync.Mutex
	power     string
	cd, usb   bool
	paramsURL string
	ejects    int
}

func (f *fakeMediaBMC) SetPower(_ context.Context, s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.power = s
	return nil
}

func (f *fakeMediaBMC) SetBootDevice(context.Context, string) error { return nil }

func (f *fakeMediaBMC) BootFromMedia(_ context.Context, isoURL, paramsURL string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cd, f.usb, f.paramsURL = true, true, paramsURL
	return nil
}

func (f *fakeMediaBMC) EjectBootMedia(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cd, f.usb = false, false
	f.ejects++
	return nil
}

func (f *fakeMediaBMC) media() (cd, usb bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cd, f.usb
}

// TestVirtualMediaBootSurvivesRestart: a node boots the ramdisk from
// virtual media (boot device pxe, power on: the BMC gets the ISO and the
// boot's parameters image); the agent stops and a new boot part starts
// from the same state folder (the outbox's encrypted Badger store, on
// disk) with a media server on another port. It serves the boot's
// parameters image again under the same name until the boot ends, and
// the node's power-off ends the boot as the first part would: both media
// ejected, the image no longer served, the boot gone from the state
// folder, and a later power-on starts the node as it is. The boot's password is in no file of the
// state folder in the clear. Fake clock, no MQTT.
func TestVirtualMediaBootSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	iso := filepath.Join(t.TempDir(), "ramdisk.iso")
	if err := os.WriteFile(iso, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const node, pw = "n1", "secret-boot-password-1f0c"
	ctx := context.Background()
	start := func() (*Boot, *outbox.Store, func()) {
		t.Helper()
		return keptBoot(t, dir, fk, Config{Ramdisk: RamdiskOptions{ISO: iso}})
	}
	get := func(u string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	bmc := &fakeMediaBMC{}

	p1, _, stop1 := start()
	p1.NoteArgs(node, map[string]any{protocol.ArgAgentUsername: "node:" + node, protocol.ArgAgentPassword: pw})
	if err := p1.setBootDevice(ctx, node, bmc, protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	if err := p1.setPower(ctx, node, bmc, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if cd, usb := bmc.media(); !cd || !usb || bmc.power != protocol.PowerOn {
		t.Fatalf("booted: CD %v, USB %v, power %s", cd, usb, bmc.power)
	}
	code, img := get(bmc.paramsURL)
	if code != http.StatusOK || !bytes.Contains(img, []byte("bm.password="+pw)) {
		t.Fatalf("the boot's parameters image: %d, %d bytes", code, len(img))
	}
	// /boot/TOKEN/params.img, to ask the restarted agent's server.
	path := bmc.paramsURL[strings.Index(bmc.paramsURL, "/boot/"):]
	stop1() // the agent stops; the node runs on with its media

	// The state folder holds the password only encrypted.
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(pw)) {
			t.Errorf("%s holds the boot's password in the clear", path)
		}
		return nil
	})

	fk.Advance(time.Minute)
	p2, st2, _ := start()
	again := p2.media.base + path
	if again == bmc.paramsURL {
		t.Fatal("the second media server has the first one's address; the test wants another")
	}
	if code, b := get(again); code != http.StatusOK || !bytes.Equal(b, img) {
		t.Fatalf("after the restart the boot's parameters image is answered %d (%d bytes, same %v); want it served until the boot ends", code, len(b), bytes.Equal(b, img))
	}
	if err := p2.setPower(ctx, node, bmc, protocol.PowerOff); err != nil {
		t.Fatal(err)
	}
	if cd, usb := bmc.media(); cd || usb || bmc.power != protocol.PowerOff {
		t.Fatalf("the restarted agent's power-off left CD inserted %v, USB stick inserted %v (power %s); want both ejected", cd, usb, bmc.power)
	}
	if code, _ := get(again); code != http.StatusNotFound {
		t.Fatalf("after the power-off the parameters image is answered %d; want 404", code)
	}
	// The boot ended and its media are out: nothing is owed any more, and
	// a later power-on starts the node as it is (not the ramdisk again).
	if kept, err := st2.LoadVMedia(); err != nil || kept[node] != nil {
		t.Fatalf("after the power-off and eject the state folder keeps %q (%v); want nothing", kept[node], err)
	}
	ejects := bmc.ejects
	if err := p2.setPower(ctx, node, bmc, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if cd, usb := bmc.media(); cd || usb || bmc.ejects != ejects {
		t.Fatalf("a power-on after the boot ended inserted CD %v, USB %v (ejects %d → %d); want the node started as it is", cd, usb, ejects, bmc.ejects)
	}
}

// keptBoot starts a boot part on the state folder dir (the outbox's
// encrypted Badger store), its media server on a port of its own, with
// cfg's site, log and clock filled in; done stops it and closes the
// store (also at the test's end).
func keptBoot(t *testing.T, dir string, fk *clock.Fake, cfg Config) (p *Boot, st *outbox.Store, done func()) {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	st, err := outbox.OpenStoreClock(dir, log, fk)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Site, cfg.Log, cfg.Clock = "s1", log, fk
	cfg.Ramdisk.Listen, cfg.Ramdisk.BrokerURL = "127.0.0.1:0", "mqtt://127.0.0.1:1883"
	p = New(cfg)
	if err := p.Keep(st); err != nil {
		t.Fatal(err)
	}
	stop, err := p.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	done = func() {
		once.Do(func() {
			stop()
			if err := st.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(done)
	return p, st, done
}
