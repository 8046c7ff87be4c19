package protocol

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// TestPayloadArgsRoundTrip: each action's payload, written in its wire
// form and read back after a trip through JSON (as a receiver gets it),
// is the payload sent; and a command carrying it passes Validate.
func TestPayloadArgsRoundTrip(t *testing.T) {
	trip := func(a map[string]any) map[string]any {
		b, err := json.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	cmd := func(action string, args map[string]any) *Message {
		return &Message{V: Version, Kind: KindCommand, ID: "c", Node: "n", Action: action, Deadline: time.Now().Add(time.Minute), Args: args}
	}
	p := PowerArgs{State: PowerReboot, BootDevice: BootPXE, ReadHardware: true, SecureBoot: true,
		AgentUsername: "node:n", AgentPassword: "pw", BootMACs: []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}}
	if got := PowerArgsOf(trip(p.Args())); !reflect.DeepEqual(got, p) {
		t.Errorf("power: %+v, want %+v", got, p)
	}
	if err := cmd(ActionPower, trip(p.Args())).Validate(); err != nil {
		t.Errorf("power: %v", err)
	}
	if a := (PowerArgs{State: PowerOff}).Args(); len(a) != 1 {
		t.Errorf("a bare power off's args are %v; want only the state", a)
	}
	for _, b := range []BootDeviceArgs{{Device: BootPXE}, {Device: BootDisk, EjectISO: true}, {Device: BootISO, ISOURL: "https://img/x.iso"}} {
		if got := BootDeviceArgsOf(trip(b.Args())); got != b {
			t.Errorf("boot_device: %+v, want %+v", got, b)
		}
		if err := cmd(ActionBootDev, trip(b.Args())).Validate(); err != nil {
			t.Errorf("boot_device %+v: %v", b, err)
		}
	}
	ab := AbortArgs{CommandID: "c4"}
	if got := AbortArgsOf(trip(ab.Args())); got != ab {
		t.Errorf("abort_step: %+v", got)
	}
	ci := CacheImageArgs{URL: "https://img/x.raw", Checksum: "sha256:00"}
	if got := CacheImageArgsOf(trip(ci.Args())); got != ci {
		t.Errorf("cache_image: %+v", got)
	}
	ps := PlanStopArgs{PlanID: "p1", Mode: PlanStopFinish}
	if got := PlanStopArgsOf(trip(ps.Args())); got != ps {
		t.Errorf("stop_plan: %+v", got)
	}
	if err := cmd(ActionPlanStop, trip(ps.Args())).Validate(); err != nil {
		t.Errorf("stop_plan: %v", err)
	}
}

// TestEveryActionHasACheck: Validate knows every action this package
// names, and refuses what a payload's check refuses.
func TestEveryActionHasACheck(t *testing.T) {
	for _, a := range []string{ActionValidate, ActionPower, ActionBootDev, ActionOOBStep, ActionInbandRun, ActionAbort,
		ActionCacheImage, ActionForget, ActionEndBoot, ActionPlanRun, ActionPlanStop, ActionVMedia} {
		if _, ok := commandChecks[a]; !ok {
			t.Errorf("action %q has no check", a)
		}
	}
	if len(commandChecks) != 12 {
		t.Errorf("%d actions have a check; this test names 12", len(commandChecks))
	}
	m := &Message{V: Version, Kind: KindCommand, ID: "c", Node: "n", Action: ActionBootDev, Deadline: time.Now().Add(time.Minute),
		Args: BootDeviceArgs{Device: BootPXE, EjectISO: true}.Args()}
	if err := m.Validate(); err == nil {
		t.Error("a boot_device pxe that ejects the ISO passed")
	}
}

// TestWriteImageChecksum: os_hash_value wins over image_checksum, as the
// ramdisk takes them.
func TestWriteImageChecksum(t *testing.T) {
	w := WriteImageArgsOf(map[string]any{"image_source": "http://i/x", "image_checksum": "md5sum", "image_os_hash_algo": "sha512", "image_os_hash_value": "ab"})
	if s, a := w.Checksum(); s != "ab" || a != "sha512" || w.ImageSource != "http://i/x" {
		t.Errorf("checksum %q %q, source %q", s, a, w.ImageSource)
	}
	w = WriteImageArgsOf(map[string]any{"image_checksum": "sha256:00"})
	if s, a := w.Checksum(); s != "sha256:00" || a != "" {
		t.Errorf("checksum %q %q", s, a)
	}
	args := map[string]any{"image_source": "http://i/x", "configdrive": map[string]any{"meta_data": map[string]any{}}}
	c := WithImageSource(args, "http://cache/t")
	if args["image_source"] != "http://i/x" || WriteImageArgsOf(c).ImageSource != "http://cache/t" || WriteImageArgsOf(c).ConfigDrive != "" {
		t.Errorf("WithImageSource: %v from %v", c, args)
	}
}
