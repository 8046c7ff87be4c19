package boot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/outbox"
	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/clock"
	"github.com/bmedge/bmedge/protocol"
)

// brokenMediaBMC is a BMC whose virtual media may refuse to insert or to
// eject, and that counts what it was asked.
type brokenMediaBMC struct {
	mu                  sync.Mutex
	power               string
	inserted            bool
	insertErr, ejectErr error
	boots, ejects       int
	bootDev             string
}

func (f *brokenMediaBMC) SetPower(_ context.Context, s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s == protocol.PowerReboot {
		s = protocol.PowerOn
	}
	f.power = s
	return nil
}

func (f *brokenMediaBMC) SetBootDevice(_ context.Context, d string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.bootDev = d
	return nil
}

func (f *brokenMediaBMC) BootFromMedia(context.Context, string, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boots++
	if f.insertErr != nil {
		return f.insertErr
	}
	f.inserted = true
	return nil
}

func (f *brokenMediaBMC) EjectBootMedia(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ejects++
	if f.ejectErr != nil {
		return f.ejectErr
	}
	f.inserted = false
	return nil
}

func (f *brokenMediaBMC) set(fn func(*brokenMediaBMC)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

// TestFailedMediaBootNeverWedges: a ramdisk boot whose virtual media the
// BMC refuses fails without changing the power, and its media are ejected
// at once; when the eject fails too they are recorded as still inserted
// (in the state folder, across a restart of the boot part), and then a
// power-off, boot device disk and a reboot each do what was asked, with
// a warning (drivers.Warn) instead of a failure, and no power-on boots the
// ramdisk again; once the BMC ejects, nothing is owed. Fake clock, no MQTT.
func TestFailedMediaBootNeverWedges(t *testing.T) {
	dir := t.TempDir()
	iso := filepath.Join(t.TempDir(), "ramdisk.iso")
	if err := os.WriteFile(iso, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	fk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	const node = "n1"
	ctx := context.Background()
	start := func() (*Boot, *outbox.Store, func()) {
		t.Helper()
		return keptBoot(t, dir, fk, Config{Ramdisk: RamdiskOptions{ISO: iso}})
	}
	bootRamdisk := func(p *Boot, b *brokenMediaBMC) error {
		t.Helper()
		p.NoteArgs(node, map[string]any{protocol.ArgAgentUsername: "node:" + node, protocol.ArgAgentPassword: "pw"})
		if err := p.setBootDevice(ctx, node, b, protocol.BootPXE); err != nil {
			t.Fatal(err)
		}
		return p.setPower(ctx, node, b, protocol.PowerReboot)
	}
	// withWarnings runs fn under a command's warnings and returns them.
	withWarnings := func(fn func(ctx context.Context) error) ([]string, error) {
		wctx, warnings := drivers.WithWarnings(ctx)
		err := fn(wctx)
		return warnings(), err
	}
	refused := errors.New("redfish BMC http://127.0.0.1:1: insert virtual media into the virtual CD: HTTP 400 ResourceCannotBeCreated")
	ejectRefused := errors.New("redfish BMC http://127.0.0.1:1: eject the virtual CD: HTTP 500 InternalError")

	t.Run("insert refused, eject works", func(t *testing.T) {
		p, st, stop := start()
		defer stop()
		b := &brokenMediaBMC{power: protocol.PowerOff, insertErr: refused}
		err := bootRamdisk(p, b)
		if err == nil || !strings.Contains(err.Error(), refused.Error()) || !strings.Contains(err.Error(), "were ejected") {
			t.Fatalf("failed boot: %v; want the BMC's answer and that the media were ejected", err)
		}
		if b.power != protocol.PowerOff || b.ejects != 1 {
			t.Fatalf("after the failed boot: power %s, ejects %d; want the power untouched and one eject", b.power, b.ejects)
		}
		if kept, _ := st.LoadVMedia(); kept[node] != nil || p.owesEject(node) {
			t.Fatalf("the failed boot's media were ejected but the node still owes an eject (kept %q)", kept[node])
		}
		w, err := withWarnings(func(c context.Context) error { return p.setPower(c, node, b, protocol.PowerOn) })
		if err != nil || len(w) > 0 || b.boots != 1 || b.power != protocol.PowerOn {
			t.Fatalf("power on after the failed boot: %v, warnings %q, boots %d, power %s; want the node started as it is", err, w, b.boots, b.power)
		}
	})

	t.Run("insert and eject refused, then a restart", func(t *testing.T) {
		p, st, stop := start()
		b := &brokenMediaBMC{power: protocol.PowerOff, insertErr: refused, ejectErr: ejectRefused}
		err := bootRamdisk(p, b)
		if err == nil || !strings.Contains(err.Error(), refused.Error()) || !strings.Contains(err.Error(), ejectRefused.Error()) ||
			!strings.Contains(err.Error(), "may still be inserted") {
			t.Fatalf("failed boot: %v; want the BMC's answers to the insert and the eject, and that the media may still be inserted", err)
		}
		if kept, _ := st.LoadVMedia(); kept[node] == nil || !strings.Contains(string(kept[node]), `"ended":true`) {
			t.Fatalf("the state folder keeps %q; want the boot as over with its eject owed", kept[node])
		}
		// Every ordinary verb does what it was asked, with a warning.
		for _, c := range []struct {
			what string
			run  func(context.Context) error
			ok   func() bool
		}{
			{"power off", func(c context.Context) error { return p.setPower(c, node, b, protocol.PowerOff) }, func() bool { return b.power == protocol.PowerOff }},
			{"boot device disk", func(c context.Context) error { return p.setBootDevice(c, node, b, protocol.BootDisk) }, func() bool { return b.bootDev == protocol.BootDisk }},
		} {
			w, err := withWarnings(c.run)
			if err != nil || !c.ok() || len(w) != 1 || !strings.Contains(w[0], ejectRefused.Error()) || !strings.Contains(w[0], "recorded as still inserted") {
				t.Fatalf("%s with media that do not eject: %v, warnings %q; want it done with one warning naming the BMC's answer", c.what, err, w)
			}
		}
		w, err := withWarnings(func(c context.Context) error { return p.setPower(c, node, b, protocol.PowerReboot) })
		if err != nil || len(w) > 0 || b.boots != 1 || b.power != protocol.PowerOn {
			t.Fatalf("reboot with the eject owed: %v, warnings %q, boots %d, power %s; want a plain reboot, no ramdisk boot", err, w, b.boots, b.power)
		}

		// The agent restarts: the eject is still owed, and still no
		// power-on boots the ramdisk.
		stop()
		p, st, _ = start()
		if !p.owesEject(node) {
			t.Fatal("after a restart the node no longer owes the eject")
		}
		if err := p.setPower(ctx, node, b, protocol.PowerReboot); err != nil || b.boots != 1 {
			t.Fatalf("reboot after the restart: %v, boots %d; want a plain reboot", err, b.boots)
		}
		// The BMC ejects again: the power-off ends what was owed.
		b.set(func(b *brokenMediaBMC) { b.ejectErr = nil })
		w, err = withWarnings(func(c context.Context) error { return p.setPower(c, node, b, protocol.PowerOff) })
		if err != nil || len(w) > 0 || b.inserted || p.owesEject(node) {
			t.Fatalf("power off once the BMC ejects: %v, warnings %q, inserted %v, owed %v", err, w, b.inserted, p.owesEject(node))
		}
		if kept, _ := st.LoadVMedia(); kept[node] != nil {
			t.Fatalf("the state folder still keeps %q", kept[node])
		}
		// And a new ramdisk boot works as ever.
		b.set(func(b *brokenMediaBMC) { b.insertErr = nil })
		if err := bootRamdisk(p, b); err != nil || !b.inserted || b.power != protocol.PowerOn {
			t.Fatalf("a new ramdisk boot: %v, inserted %v, power %s", err, b.inserted, b.power)
		}
	})
}
