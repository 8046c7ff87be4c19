package boot

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/protocol"
)

// isoBMC is a BMC with virtual media that boots a given ISO.
type isoBMC struct {
	fakeMediaBMC
	iso string
}

func (f *isoBMC) Validate(context.Context) error                                { return nil }
func (f *isoBMC) PowerState(context.Context) (string, error)                    { return f.power, nil }
func (f *isoBMC) RunStep(context.Context, string, string, map[string]any) error { return nil }
func (f *isoBMC) BootISO(_ context.Context, u string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.iso, f.cd = u, true
	return nil
}

// noMediaBMC boots an ISO by its own word but has no virtual media to
// eject (not a mediaBooter).
type noMediaBMC struct{}

func (noMediaBMC) Validate(context.Context) error                                { return nil }
func (noMediaBMC) SetPower(context.Context, string) error                        { return nil }
func (noMediaBMC) PowerState(context.Context) (string, error)                    { return "", nil }
func (noMediaBMC) SetBootDevice(context.Context, string) error                   { return nil }
func (noMediaBMC) RunStep(context.Context, string, string, map[string]any) error { return nil }
func (noMediaBMC) BootISO(context.Context, string) error                         { return nil }

// TestBootISOSurvivesPowerCycles: a live ISO replaces a ramdisk boot's
// media still inserted (ejected first), stays inserted across the
// operator's power-offs (no ramdisk boot is under way), and EjectISO
// ejects it; a BMC without virtual media is refused, saying so.
func TestBootISOSurvivesPowerCycles(t *testing.T) {
	iso := filepath.Join(t.TempDir(), "ramdisk.iso")
	if err := os.WriteFile(iso, make([]byte, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := New(Config{Site: "s1", Log: slog.New(slog.DiscardHandler),
		Ramdisk: RamdiskOptions{ISO: iso, Listen: "127.0.0.1:0", BrokerURL: "mqtt://127.0.0.1:1883"}})
	stop, err := p.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	const node = "n1"
	b := &isoBMC{}
	p.NoteArgs(node, map[string]any{protocol.ArgAgentUsername: "node:" + node, protocol.ArgAgentPassword: "pw"})
	if err := p.setBootDevice(ctx, node, b, protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	if err := p.setPower(ctx, node, b, protocol.PowerOn); err != nil {
		t.Fatal(err)
	}
	if err := p.BootISO(ctx, node, b, "http://cache.example/images/t"); err != nil {
		t.Fatal(err)
	}
	if cd, usb := b.media(); !cd || usb || b.iso != "http://cache.example/images/t" || b.ejects != 1 {
		t.Fatalf("after BootISO: CD %v, USB %v, ISO %q, %d ejects; want the ramdisk's media ejected once, then the ISO", cd, usb, b.iso, b.ejects)
	}
	for _, st := range []string{protocol.PowerOff, protocol.PowerOn, protocol.PowerOff} {
		if err := p.setPower(ctx, node, b, st); err != nil {
			t.Fatal(err)
		}
	}
	if cd, _ := b.media(); !cd || b.ejects != 1 {
		t.Fatalf("after power cycles: CD %v, %d ejects; want the ISO kept", cd, b.ejects)
	}
	if err := p.EjectISO(ctx, node, b); err != nil {
		t.Fatal(err)
	}
	if cd, _ := b.media(); cd || b.ejects != 2 {
		t.Fatalf("after EjectISO: CD %v, %d ejects", cd, b.ejects)
	}
	if err := p.BootISO(ctx, node, noMediaBMC{}, "http://cache.example/images/t"); err == nil || !strings.Contains(err.Error(), "no virtual media") {
		t.Fatalf("BootISO on a BMC without virtual media: %v", err)
	}
}
