package bmc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// oobBMC is a BMC with firmware and BIOS: it records the updates it was
// given and fails with failUpdate (naming the URL it got, as a driver does).
type oobBMC struct {
	stubBMC
	got        []drivers.FirmwareUpdate
	failUpdate bool
	bios       []drivers.BIOSSetting
}

func (b *oobBMC) FirmwareComponents(context.Context) ([]drivers.FirmwareComponent, error) {
	return []drivers.FirmwareComponent{{Component: "bmc", Version: "1.0"}}, nil
}

func (b *oobBMC) UpdateFirmware(_ context.Context, u []drivers.FirmwareUpdate) ([]drivers.FirmwareComponent, error) {
	b.got = append(b.got, u...)
	if b.failUpdate {
		return nil, errors.New("firmware update 1 of 1 (bmc from " + u[0].URL + "): the BMC's task ended Exception")
	}
	return []drivers.FirmwareComponent{{Component: "bmc", Version: "2.0"}}, nil
}

func (b *oobBMC) BIOSSettings(context.Context) ([]drivers.BIOSSetting, error) { return b.bios, nil }

type noBoot struct{}

func (noBoot) SetBootDevice(context.Context, string, drivers.BMC, string) error { return nil }
func (noBoot) SetPower(context.Context, string, drivers.BMC, string) error      { return nil }
func (noBoot) NoteArgs(string, map[string]any)                                  {}

// TestFirmwareAndBIOSResultData: validate leaves the firmware and BIOS
// read in the result data; a BIOS step leaves the BIOS; firmware.update
// hands the driver the site cache's URL for each image (never the
// origin's), after the cache verified all of them, reports the versions
// read back, and names the origin (not the cache's token URL) in a
// failure; an image without a checksum, one the cache refuses and a site
// without a cache fail before the driver is called; an oversize BIOS
// reading loses its registry fields first.
func TestFirmwareAndBIOSResultData(t *testing.T) {
	const sum = "sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	var asked []string
	set := New(Config{Site: "s1", BlobURL: func(_ context.Context, u, c string) (string, error) {
		asked = append(asked, u)
		if strings.Contains(u, "bad") {
			return "", errors.New("checksum mismatch for image " + u)
		}
		return "http://10.0.0.1:8080/images/0123456789abcdef0123456789abcdef", nil
	}})
	ro := true
	b := &oobBMC{bios: []drivers.BIOSSetting{{Name: "NumLock", Value: "On", ReadOnly: &ro}}}
	set.Put("n1", "redfish", b)
	run := func(m *protocol.Message) (map[string]any, error) {
		t.Helper()
		m.Node, m.Driver = "n1", "redfish"
		ctx, data := WithData(context.Background())
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		err := set.Exec(ctx, m, noBoot{})
		return data(), err
	}
	step := func(iface, name string, args map[string]any) *protocol.Message {
		return &protocol.Message{Action: protocol.ActionOOBStep, Step: &protocol.Step{Interface: iface, Step: name, Args: args}}
	}
	fwArgs := func(url, checksum string) map[string]any {
		s := map[string]any{"component": "bmc", "url": url}
		if checksum != "" {
			s["checksum"] = checksum
		}
		return map[string]any{"settings": []any{s}}
	}

	data, err := run(&protocol.Message{Action: protocol.ActionValidate})
	if err != nil {
		t.Fatal(err)
	}
	fw, _ := data[protocol.DataFirmware].([]any)
	bios, _ := data[protocol.DataBIOS].([]any)
	if len(fw) != 1 || len(bios) != 1 || bios[0].(map[string]any)["read_only"] != true {
		t.Fatalf("validate's data: %v", data)
	}
	if data, err := run(step("bios", "apply_configuration", nil)); err != nil || data[protocol.DataBIOS] == nil || data[protocol.DataFirmware] != nil {
		t.Fatalf("bios step: %v %v; want the BIOS only", data, err)
	}

	data, err = run(step("firmware", "update", fwArgs("http://origin.example/fw/bmc.bin?sig=s3cret", sum)))
	if err != nil {
		t.Fatal(err)
	}
	if len(b.got) != 1 || b.got[0].URL != "http://10.0.0.1:8080/images/0123456789abcdef0123456789abcdef" {
		t.Fatalf("the driver got %+v; want the cache's URL", b.got)
	}
	if fw, _ := data[protocol.DataFirmware].([]any); len(fw) != 1 || fw[0].(map[string]any)["current_version"] != "2.0" {
		t.Fatalf("firmware.update's data: %v", data)
	}

	b.failUpdate = true
	_, err = run(step("firmware", "update", fwArgs("http://origin.example/fw/bmc.bin?sig=s3cret", sum)))
	if err == nil || !strings.Contains(err.Error(), "http://origin.example/fw/bmc.bin") || strings.Contains(err.Error(), "/images/") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("failed update: %v; want the origin named, without its query or the cache's token", err)
	}
	b.failUpdate = false

	calls := len(b.got)
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{fwArgs("http://origin.example/fw/bmc.bin", ""), "has no checksum"},
		{fwArgs("http://origin.example/fw/bad.bin", sum), "was not given to the BMC: checksum mismatch"},
		{map[string]any{"settings": []any{fwArgs("http://origin.example/a.bin", sum)["settings"].([]any)[0],
			fwArgs("http://origin.example/bad.bin", sum)["settings"].([]any)[0]}}, "settings[1] (bmc)"},
	} {
		if _, err := run(step("firmware", "update", c.args)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want %q", c.args, err, c.want)
		}
	}
	if len(b.got) != calls {
		t.Fatalf("the driver was called for images the site did not verify: %+v", b.got[calls:])
	}
	set.cfg.BlobURL = nil
	if _, err := run(step("firmware", "update", fwArgs("http://origin.example/fw/bmc.bin", sum))); err == nil || !strings.Contains(err.Error(), "no image cache") {
		t.Fatalf("without a cache: %v", err)
	}

	long := strings.Repeat("x", 150)
	var big []drivers.BIOSSetting
	for i := range 1000 {
		big = append(big, drivers.BIOSSetting{Name: fmt.Sprintf("Setting%04d", i), Value: long, AttributeType: "String",
			AllowableValues: []string{long + "a", long + "b"}})
	}
	out := boundBIOS(big)
	if len(out) != 1000 || out[0].AttributeType != "" || out[0].Value != long {
		t.Fatalf("oversize BIOS: %d settings, first %+v; want all, without registry fields", len(out), out[0].AttributeType)
	}
}
