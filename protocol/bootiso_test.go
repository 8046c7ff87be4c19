package protocol

import (
	"strings"
	"testing"
	"time"
)

// TestBootDeviceISO: a boot_device command of device iso carries its
// ISO's URL, and eject_iso goes with device disk only.
func TestBootDeviceISO(t *testing.T) {
	cmd := func(args map[string]any) *Message {
		return &Message{V: Version, Kind: KindCommand, ID: "c1", Node: "n1", Action: ActionBootDev, Deadline: time.Unix(1000, 0), Args: args}
	}
	b, err := Encode(cmd(map[string]any{"device": BootISO, ArgISOURL: "http://images.example/live.iso"}))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(b)
	if err != nil || m.Args[ArgISOURL] != "http://images.example/live.iso" {
		t.Fatalf("decoded %+v, %v", m, err)
	}
	if err := cmd(map[string]any{"device": BootDisk, ArgEjectISO: true}).Validate(); err != nil {
		t.Fatalf("disk with eject: %v", err)
	}
	for _, c := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"device": BootISO}, ArgISOURL},
		{map[string]any{"device": BootISO, ArgISOURL: strings.Repeat("x", MaxISOURLBytes+1)}, ArgISOURL},
		{map[string]any{"device": BootPXE, ArgEjectISO: true}, ArgEjectISO},
		{map[string]any{"device": BootDisk, ArgEjectISO: "yes"}, ArgEjectISO},
		{map[string]any{"device": "cdrom"}, "want"},
	} {
		if err := cmd(c.args).Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v; want an error naming %s", c.args, err, c.want)
		}
	}
}
