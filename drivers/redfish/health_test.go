package redfish_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/recorded"
	"github.com/bmedge/bmedge/protocol"
)

// copyFixture copies a recorded tree into a test folder (the recording
// stays as it is) and returns the copy's path and a writer of resources
// into it.
func copyFixture(t *testing.T, fixture string) (string, func(path string, doc map[string]any)) {
	t.Helper()
	src := recorded.Dir(fixture)
	dst := filepath.Join(t.TempDir(), fixture)
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst, func(path string, doc map[string]any) {
		t.Helper()
		dir := filepath.Join(dst, strings.TrimPrefix(path, "/redfish/v1/"))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		doc["@odata.id"] = path
		b, _ := json.Marshal(doc)
		if err := os.WriteFile(filepath.Join(dir, "index.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReadHealthSensorsCollection: OpenBMC's stock tree (a copy) whose
// chassis has no Thermal or Power resource but a Sensors collection (as
// bmcweb serves it), and whose event log lists its entries as links
// only. The system's HealthRollup Warning makes the health Warning
// (Status.Health says OK); a CPU above its UpperCritical reading is
// Critical though its Status says OK; the entries are read one by one
// and come oldest first.
func TestReadHealthSensorsCollection(t *testing.T) {
	t.Parallel()
	dir, write := copyFixture(t, "openbmc-stock")
	const ch = "/redfish/v1/Chassis/chassis"
	const sys = "/redfish/v1/Systems/system"
	ok := map[string]any{"Health": "OK", "State": "Enabled"}
	write(ch+"/Sensors", map[string]any{"Name": "Sensors", "Members": []any{
		map[string]any{"@odata.id": ch + "/Sensors/temperature_CPU0"},
		map[string]any{"@odata.id": ch + "/Sensors/fan_tach_Fan0"},
	}, "Members@odata.count": 2})
	write(ch+"/Sensors/temperature_CPU0", map[string]any{"Id": "temperature_CPU0", "Name": "CPU0 Temp", "Reading": 95, "ReadingType": "Temperature",
		"ReadingUnits": "Cel", "Status": ok, "Thresholds": map[string]any{"UpperCaution": map[string]any{"Reading": 80}, "UpperCritical": map[string]any{"Reading": 90}}})
	write(ch+"/Sensors/fan_tach_Fan0", map[string]any{"Id": "fan_tach_Fan0", "Name": "Fan0", "Reading": 5000, "ReadingType": "Rotational",
		"ReadingUnits": "RPM", "Status": ok, "Thresholds": map[string]any{"LowerCritical": map[string]any{"Reading": 1000}}})
	write(sys+"/LogServices", map[string]any{"Name": "System Log Services", "Members": []any{map[string]any{"@odata.id": sys + "/LogServices/EventLog"}}})
	write(sys+"/LogServices/EventLog", map[string]any{"Id": "EventLog", "Name": "Event Log", "Entries": map[string]any{"@odata.id": sys + "/LogServices/EventLog/Entries"}})
	var links []any
	for _, i := range []int{3, 1, 2} {
		p := fmt.Sprintf("%s/LogServices/EventLog/Entries/%d", sys, i)
		links = append(links, map[string]any{"@odata.id": p})
		write(p, map[string]any{"Id": fmt.Sprint(i), "Name": "System Event Log Entry", "EntryType": "Event", "Severity": "Warning",
			"Created": time.Date(2026, 11, 2, 10, i, 0, 0, time.UTC).Format(time.RFC3339), "Message": fmt.Sprintf("Fan0 speed low, event %d", i)})
	}
	write(sys+"/LogServices/EventLog/Entries", map[string]any{"Name": "System Event Log Entries", "Members": links, "Members@odata.count": 3})
	sysFile := filepath.Join(dir, "Systems", "system", "index.json")
	var doc map[string]any
	b, _ := os.ReadFile(sysFile)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	doc["Status"] = map[string]any{"Health": "OK", "HealthRollup": "Warning", "State": "Enabled"}
	b, _ = json.Marshal(doc)
	if err := os.WriteFile(sysFile, b, 0o644); err != nil {
		t.Fatal(err)
	}

	s := startRecorded(t, dir, recorded.Profiles["openbmc-stock"], 0)
	d := recordedDriver(t, s, &syncBuffer{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := d.ReadHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Health != protocol.HealthWarning {
		t.Errorf("health %q; want Warning (the rollup's)", rep.Health)
	}
	got := map[string]string{}
	for _, x := range rep.Sensors {
		got[x.Name] = fmt.Sprintf("%s %s %v %s", x.Kind, x.Status, *x.Reading, x.Units)
	}
	for name, want := range map[string]string{"CPU0 Temp": "temperature Critical 95 Cel", "Fan0": "fan OK 5000 RPM"} {
		if got[name] != want {
			t.Errorf("sensor %s: %q; want %q (all: %v)", name, got[name], want, got)
		}
	}
	var ids []string
	for _, e := range rep.Events {
		ids = append(ids, e.ID+" "+e.Severity)
	}
	if strings.Join(ids, ", ") != "EventLog/1 Warning, EventLog/2 Warning, EventLog/3 Warning" {
		t.Errorf("events %v; want the three entries oldest first", ids)
	}
	// The recording has no Thermal or Power: the reading says so.
	if !strings.Contains(rep.Error, "Thermal") || !strings.Contains(rep.Error, "404") {
		t.Errorf("reading error %q; want the missing Thermal named", rep.Error)
	}
}

// TestReadHealthManagerSEL: a system without log services of its own
// (as iDRAC's) has its manager's SEL read, and not the manager's other
// logs; DMTF's mockup tree (a copy) with its system's LogServices link
// taken out.
func TestReadHealthManagerSEL(t *testing.T) {
	t.Parallel()
	dir, write := copyFixture(t, "dmtf-public-rackmount1")
	const mgr = "/redfish/v1/Managers/BMC"
	write(mgr+"/LogServices", map[string]any{"Name": "Log Services", "Members": []any{
		map[string]any{"@odata.id": mgr + "/LogServices/Lclog"},
		map[string]any{"@odata.id": mgr + "/LogServices/Sel"},
	}})
	for _, ls := range []string{"Lclog", "Sel"} {
		write(mgr+"/LogServices/"+ls, map[string]any{"Id": ls, "Name": ls, "Entries": map[string]any{"@odata.id": mgr + "/LogServices/" + ls + "/Entries"}})
		write(mgr+"/LogServices/"+ls+"/Entries", map[string]any{"Name": ls + " entries", "Members": []any{
			map[string]any{"@odata.id": mgr + "/LogServices/" + ls + "/Entries/1", "Id": "1", "Severity": "Critical", "Message": ls + ": the first entry",
				"Created": "2026-11-03T10:00:00Z"},
		}})
	}
	sysFile := filepath.Join(dir, "Systems", "437XR1138R2", "index.json")
	var doc map[string]any
	b, _ := os.ReadFile(sysFile)
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "LogServices")
	b, _ = json.Marshal(doc)
	if err := os.WriteFile(sysFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	s := startRecorded(t, dir, recorded.Profiles["dmtf-public-rackmount1"], 0)
	d := recordedDriver(t, s, &syncBuffer{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := d.ReadHealth(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Events) != 1 || rep.Events[0].ID != "Sel/1" || rep.Events[0].Severity != protocol.HealthCritical || rep.Events[0].Message != "Sel: the first entry" {
		t.Errorf("events %+v; want the manager's SEL entry alone", rep.Events)
	}
	if rep.Health != protocol.HealthOK {
		t.Errorf("health %q; want the tree's OK", rep.Health)
	}
	for _, r := range s.Requests() {
		if strings.Contains(r, "Lclog") {
			t.Errorf("the driver read %s; only the SEL is the system's", r)
		}
	}
}
