package systest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/cli"
	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/drivers/redfish/recorded"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

const hpeSystem = "/redfish/v1/Systems/1"

// hpeTree copies the recorded iLO 5 tree into a test folder and gives
// it what the recording left out, in iLO's shape: Thermal (fans in
// percent, temperatures with critical and fatal thresholds), Power, and
// an IML log service whose entries are made by entries(i) for i in
// 1..n (inline members, as iLO lists them). health and rollup are the
// system's Status.Health and HealthRollup.
func hpeTree(t *testing.T, health, rollup string, n int, entry func(i int) map[string]any) string {
	t.Helper()
	src := recorded.Dir("hpe-ilo5-dl325")
	dst := filepath.Join(t.TempDir(), "hpe-ilo5-dl325")
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
	write := func(path string, doc map[string]any) {
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
	sysFile := filepath.Join(dst, "Systems", "1", "index.json")
	var sys map[string]any
	b, err := os.ReadFile(sysFile)
	if err != nil || json.Unmarshal(b, &sys) != nil {
		t.Fatalf("read the system: %v", err)
	}
	sys["Status"] = map[string]any{"Health": health, "HealthRollup": rollup, "State": "Enabled"}
	b, _ = json.Marshal(sys)
	if err := os.WriteFile(sysFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	ok := map[string]any{"Health": "OK", "State": "Enabled"}
	write("/redfish/v1/Chassis/1/Thermal", map[string]any{"@odata.type": "#Thermal.v1_6_2.Thermal", "Id": "Thermal", "Name": "Thermal",
		"Fans": []any{
			map[string]any{"MemberId": "0", "Name": "Fan 1", "Reading": 35, "ReadingUnits": "Percent", "Status": ok},
			map[string]any{"MemberId": "1", "Name": "Fan 2", "Reading": 0, "ReadingUnits": "Percent", "Status": map[string]any{"Health": "Critical", "State": "Enabled"}},
			map[string]any{"MemberId": "2", "Name": "Fan 7", "Reading": 0, "ReadingUnits": "Percent", "Status": map[string]any{"State": "Absent"}},
		},
		"Temperatures": []any{
			map[string]any{"MemberId": "0", "Name": "01-Inlet Ambient", "ReadingCelsius": 17, "UpperThresholdCritical": 42, "UpperThresholdFatal": 47, "Status": ok},
			// Past its critical threshold, which iLO does not always say
			// in Status: the reading says it.
			map[string]any{"MemberId": "1", "Name": "02-CPU 1", "ReadingCelsius": 80, "UpperThresholdCritical": 75, "Status": ok},
		}})
	write("/redfish/v1/Chassis/1/Power", map[string]any{"@odata.type": "#Power.v1_3_0.Power", "Id": "Power", "Name": "PowerMetrics",
		"PowerSupplies": []any{
			map[string]any{"MemberId": "0", "Name": "HpeServerPowerSupply", "LastPowerOutputWatts": 88, "Status": ok},
			map[string]any{"MemberId": "1", "Name": "HpeServerPowerSupply 2", "LastPowerOutputWatts": 0, "Status": map[string]any{"Health": "Warning", "State": "Enabled"}},
		}})
	write(hpeSystem+"/LogServices", map[string]any{"@odata.type": "#LogServiceCollection.LogServiceCollection", "Name": "Log Service Collection",
		"Members": []any{map[string]any{"@odata.id": hpeSystem + "/LogServices/IML"}}, "Members@odata.count": 1})
	write(hpeSystem+"/LogServices/IML", map[string]any{"@odata.type": "#LogService.v1_0_0.LogService", "Id": "IML", "Name": "Integrated Management Log",
		"Entries": map[string]any{"@odata.id": hpeSystem + "/LogServices/IML/Entries"}})
	write(hpeSystem+"/LogServices/IML/Entries", entriesDoc(n, entry))
	return dst
}

// entriesDoc is an IML entries collection of n inline entries.
func entriesDoc(n int, entry func(i int) map[string]any) map[string]any {
	members := make([]any, 0, n)
	for i := 1; i <= n; i++ {
		e := entry(i)
		e["@odata.id"] = fmt.Sprintf("%s/LogServices/IML/Entries/%d", hpeSystem, i)
		e["@odata.type"] = "#LogEntry.v1_0_0.LogEntry"
		e["Id"] = fmt.Sprint(i)
		members = append(members, e)
	}
	return map[string]any{"@odata.id": hpeSystem + "/LogServices/IML/Entries", "Name": "Integrated Management Log Entries", "Members": members, "Members@odata.count": n}
}

func imlEntry(i int) map[string]any {
	return map[string]any{"Name": "Integrated Management Log", "EntryType": "Oem", "OemRecordFormat": "Hpe-IML",
		"Created":  time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute).Format(time.RFC3339),
		"Severity": []string{"OK", "Warning", "Critical"}[i%3], "Message": fmt.Sprintf("IML entry %d: Fan 2 failure detected (Fan Location: System)", i)}
}

// healthRig is a coordinator and an edge agent polling every 300 ms,
// and a redfish node behind s, managed.
func healthRig(t *testing.T, s *recorded.Server, password string) (*testrig.Client, string, string) {
	return healthRigVia(t, s, password, nil)
}

// healthRigVia is healthRig with the agent's broker URL changed by via.
func healthRigVia(t *testing.T, s *recorded.Server, password string, via func(string) string) (*testrig.Client, string, string) {
	t.Helper()
	return healthRigOpts(t, s, password, testrig.Options{}, via)
}

// healthRigOpts is healthRigVia with the coordinator's options.
func healthRigOpts(t *testing.T, s *recorded.Server, password string, o testrig.Options, via func(string) string) (*testrig.Client, string, string) {
	t.Helper()
	return healthRigAgent(t, s, password, o, via, agent.Config{PowerSyncInterval: 300 * time.Millisecond})
}

// healthRigAgent is healthRigOpts with the edge agent's configuration.
func healthRigAgent(t *testing.T, s *recorded.Server, password string, o testrig.Options, via func(string) string, ac agent.Config) (*testrig.Client, string, string) {
	t.Helper()
	c := testrig.Coordinator(t, o)
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	if via != nil {
		creds.BrokerURL = via(creds.BrokerURL)
	}
	testrig.StartAgentConfig(t, creds, ac)
	var n testrig.Node
	body := map[string]any{"name": "ilo1", "driver": "redfish", "conductor_group": "rack1",
		"driver_info": map[string]any{"redfish_address": s.URL, "redfish_username": "admin", "redfish_password": password}}
	if code := cl.Do("POST", "/v1/nodes", body, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage: %q, last_error %q", got.State, got.LastError)
	}
	return cl, n.UUID, c.APIAddr
}

func waitUntil(t *testing.T, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type sensorsAnswer struct {
	Health  *string `json:"health"`
	ReadAt  *string `json:"read_at"`
	Sensors []struct {
		Name          string   `json:"name"`
		Kind          string   `json:"kind"`
		Reading       *float64 `json:"reading"`
		Units         string   `json:"units"`
		Status        string   `json:"status"`
		State         string   `json:"state"`
		UpperCritical *float64 `json:"upper_critical"`
	} `json:"sensors"`
}

type eventsAnswer struct {
	Events []struct {
		Seq      uint64  `json:"seq"`
		ID       string  `json:"id"`
		Time     *string `json:"time"`
		Severity *string `json:"severity"`
		Message  string  `json:"message"`
	} `json:"events"`
	LastSeq   uint64 `json:"last_seq"`
	NewestSeq uint64 `json:"newest_seq"`
	Dropped   uint64 `json:"dropped"`
}

// TestHealthRedfish: the recorded iLO 5 tree (a copy) with a Critical
// system, a failed fan, a CPU past its critical threshold, a power
// supply in Warning and three IML entries, behind a real edge agent's
// power sync:
//   - the node's health is Critical at 1.109 (curl, and Debian's
//     baremetal CLI) and absent at 1.108; the change is in the history
//     with Ironic's words;
//   - GET …/sensors shows the fan, the CPU (status from its reading and
//     threshold) and the power supply; an absent fan has no reading;
//   - GET …/events shows the three entries; ?since=last_seq none;
//   - the BMC's Health back to OK with HealthRollup Warning makes the
//     node Warning; a new IML entry is the one new event.
func TestHealthRedfish(t *testing.T) {
	t.Parallel()
	const pw = "pa55word"
	dir := hpeTree(t, "Critical", "Critical", 3, imlEntry)
	s, err := recorded.Start(recorded.Options{Fixture: dir, Username: "admin", Password: pw, Quirks: recorded.Profiles["hpe-ilo5-dl325"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	cl, id, apiAddr := healthRig(t, s, pw)

	health := func() any {
		var raw map[string]any
		cl.Do("GET", "/v1/nodes/"+id, nil, &raw)
		return raw["health"]
	}
	waitUntil(t, "health Critical", 30*time.Second, func() bool { return health() == "Critical" })

	status, body := curlDo(t, "http://"+apiAddr, "GET", "/v1/nodes/"+id+"?fields=health,power_state", "")
	if status != "200" || !strings.Contains(body, `"health":"Critical"`) {
		t.Errorf("curl at the latest version: %s %s; want health Critical", status, body)
	}
	out, err := runCurl("-sS", "-H", "X-OpenStack-Ironic-API-Version: 1.108", "http://"+apiAddr+"/v1/nodes/"+id)
	if err != nil || strings.Contains(out, `"health"`) || !strings.Contains(out, `"uuid"`) {
		t.Errorf("curl at 1.108: %v %s; want the node without health", err, out)
	}
	if out := baremetalCLI(t, apiAddr, "--os-baremetal-api-version", "1.109", "node", "show", "ilo1", "-f", "json"); !strings.Contains(out, `"health": "Critical"`) {
		t.Errorf("baremetal node show at 1.109: %s; want health Critical", out)
	}
	if h := historyText(cl, id); !strings.Contains(h, "Node health status changed: health='Critical' (previously 'None')") {
		t.Errorf("history lacks the health change:\n%s", h)
	}

	var sn sensorsAnswer
	if code := cl.Do("GET", "/v1/nodes/"+id+"/sensors", nil, &sn); code != 200 || sn.Health == nil || *sn.Health != "Critical" || sn.ReadAt == nil {
		t.Fatalf("sensors: %d %+v", code, sn)
	}
	got := map[string]string{}
	for _, x := range sn.Sensors {
		r := "null"
		if x.Reading != nil {
			r = fmt.Sprint(*x.Reading)
		}
		got[x.Name] = fmt.Sprintf("%s %s %s%s %s", x.Kind, x.Status, r, x.Units, x.State)
	}
	want := map[string]string{
		"Fan 1":                  "fan OK 35% Enabled",
		"Fan 2":                  "fan Critical 0% Enabled",
		"Fan 7":                  "fan  null Absent",
		"01-Inlet Ambient":       "temperature OK 17Cel Enabled",
		"02-CPU 1":               "temperature Critical 80Cel Enabled",
		"HpeServerPowerSupply":   "power_supply OK 88W Enabled",
		"HpeServerPowerSupply 2": "power_supply Warning 0W Enabled",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("sensor %q: %q; want %q", k, got[k], v)
		}
	}
	var ev eventsAnswer
	if code := cl.Do("GET", "/v1/nodes/"+id+"/events", nil, &ev); code != 200 || len(ev.Events) != 3 {
		t.Fatalf("events: %d %+v; want the 3 IML entries", code, ev)
	}
	if e := ev.Events[2]; e.ID != "IML/3" || e.Severity == nil || *e.Severity != "OK" || !strings.Contains(e.Message, "IML entry 3") || e.Time == nil || *e.Time != "2026-11-01T00:03:00Z" {
		t.Errorf("the newest event: %+v", e)
	}
	var none eventsAnswer
	if cl.Do("GET", fmt.Sprintf("/v1/nodes/%s/events?since=%d", id, ev.LastSeq), nil, &none); len(none.Events) != 0 || none.LastSeq != ev.LastSeq {
		t.Errorf("events since %d: %+v; want none", ev.LastSeq, none)
	}

	// The CLI shows the same (--url wins over COORDINATOR_URL; the
	// coordinator takes no credentials, so OS_* change nothing).
	cliOut := func(args ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		if code := cli.Main(append([]string{"--url", "http://" + apiAddr}, args...), strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("coordinator %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
		}
		return out.String()
	}
	if out := cliOut("node", "sensors", "ilo1", "-c", "name", "-c", "status", "-f", "value"); !strings.Contains(out, "Fan 2 Critical\n") || !strings.Contains(out, "02-CPU 1 Critical\n") {
		t.Errorf("coordinator node sensors: %s", out)
	}
	if out := cliOut("node", "events", "ilo1", "--since", "2", "-c", "id", "-c", "severity", "-f", "value"); out != "IML/3 OK\n" {
		t.Errorf("coordinator node events --since 2: %q; want the third entry alone", out)
	}
	if out := cliOut("node", "show", "ilo1", "-f", "json"); !strings.Contains(out, `"health": "Critical"`) {
		t.Errorf("coordinator node show lacks health Critical: %s", out)
	}

	// The BMC recovers, its rollup still says Warning; a new entry.
	s.Edit(hpeSystem, func(d map[string]any) {
		d["Status"] = map[string]any{"Health": "OK", "HealthRollup": "Warning", "State": "Enabled"}
	})
	s.Edit(hpeSystem+"/LogServices/IML/Entries", func(d map[string]any) {
		d["Members"] = entriesDoc(4, imlEntry)["Members"]
	})
	waitUntil(t, "health Warning", 30*time.Second, func() bool { return health() == "Warning" })
	if h := historyText(cl, id); !strings.Contains(h, "Node health status changed: health='Warning' (previously 'Critical')") {
		t.Errorf("history lacks the second health change:\n%s", h)
	}
	waitUntil(t, "the new IML entry", 30*time.Second, func() bool {
		cl.Do("GET", fmt.Sprintf("/v1/nodes/%s/events?since=%d", id, ev.LastSeq), nil, &none)
		return len(none.Events) > 0
	})
	if len(none.Events) != 1 || none.Events[0].ID != "IML/4" {
		t.Errorf("events since %d: %+v; want IML/4 alone", ev.LastSeq, none.Events)
	}
	// This API's own paths refuse what they do not take.
	if status, body := curlDo(t, "http://"+apiAddr, "GET", "/v1/nodes/"+id+"/events?limit=0", ""); status != "400" || !strings.Contains(body, "limit") {
		t.Errorf("limit=0: %s %s; want 400 naming limit", status, body)
	}
	if status, _ := curlDo(t, "http://"+apiAddr, "GET", "/v1/nodes/"+id+"/sensors?detail=true", ""); status != "400" {
		t.Errorf("sensors?detail: %s; want 400", status)
	}
}

// TestHealthEventsBounded: a BMC whose IML holds 10,000 entries, one
// with a 2,000-byte message. The site sends the newest 200
// (protocol.MaxReportEvents) and cuts the message to 512 bytes; when
// 400 more come, the coordinator keeps the newest 500
// (readings.MaxEventsKept) and says how many it dropped.
func TestHealthEventsBounded(t *testing.T) {
	t.Parallel()
	const pw = "pa55word"
	long := func(i int) map[string]any {
		e := imlEntry(i)
		if i == 10000 {
			e["Message"] = strings.Repeat("x", 2000)
		}
		return e
	}
	dir := hpeTree(t, "OK", "OK", 10000, long)
	s, err := recorded.Start(recorded.Options{Fixture: dir, Username: "admin", Password: pw, Quirks: recorded.Profiles["hpe-ilo5-dl325"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	// Each reading carries a 2 MB log: power sync every 3 s (so each
	// power reading has 3 s) and health read at most every 3 s, so that
	// under the race detector on a loaded machine the replayer is not
	// kept busy serving the log while the power reading waits (three
	// failed power readings in a row would set maintenance, and health is
	// read only after a good one). The waits are sized for that machine.
	cl, id, _ := healthRigAgent(t, s, pw, testrig.Options{}, nil, agent.Config{PowerSyncInterval: 3 * time.Second, HealthInterval: 3 * time.Second})
	var ev eventsAnswer
	waitUntil(t, "the first events", 6*time.Minute, func() bool {
		cl.Do("GET", "/v1/nodes/"+id+"/events", nil, &ev)
		return len(ev.Events) > 0
	})
	if len(ev.Events) != 200 || ev.Events[0].ID != "IML/9801" || ev.Events[199].ID != "IML/10000" {
		t.Fatalf("first events: %d, from %s to %s; want the newest 200, IML/9801 to IML/10000", len(ev.Events), ev.Events[0].ID, ev.Events[len(ev.Events)-1].ID)
	}
	if n := len(ev.Events[199].Message); n != 512 {
		t.Errorf("a 2000-byte message is kept with %d bytes; want 512", n)
	}
	s.Edit(hpeSystem+"/LogServices/IML/Entries", func(d map[string]any) {
		d["Members"] = entriesDoc(10400, imlEntry)["Members"]
	})
	waitUntil(t, "the 400 new entries", 6*time.Minute, func() bool {
		cl.Do("GET", "/v1/nodes/"+id+"/events", nil, &ev)
		return len(ev.Events) > 0 && ev.Events[len(ev.Events)-1].ID == "IML/10400"
	})
	// The site reads the newest 200 of 400 new entries; the coordinator
	// keeps 500 of the 400 it received.
	if len(ev.Events) != 400 || ev.Events[0].ID != "IML/9801" || ev.Dropped != 0 {
		t.Errorf("after 400 new entries: %d kept from %s, dropped %d; want 400 from IML/9801 (200 first, the newest 200 of the next 400)", len(ev.Events), ev.Events[0].ID, ev.Dropped)
	}
	s.Edit(hpeSystem+"/LogServices/IML/Entries", func(d map[string]any) {
		d["Members"] = entriesDoc(10600, imlEntry)["Members"]
	})
	waitUntil(t, "200 more", 6*time.Minute, func() bool {
		cl.Do("GET", "/v1/nodes/"+id+"/events", nil, &ev)
		return len(ev.Events) > 0 && ev.Events[len(ev.Events)-1].ID == "IML/10600"
	})
	if len(ev.Events) != 500 || ev.Dropped != 100 || ev.NewestSeq != 600 {
		t.Errorf("after 600 sent: %d kept, %d dropped, newest seq %d; want 500, 100, 600", len(ev.Events), ev.Dropped, ev.NewestSeq)
	}
}

// TestHealthIPMI: a node behind ipmi_sim whose fan turns at 300 RPM,
// below its non-recoverable threshold, and whose SEL holds the fan's
// entry: health Critical, the fan Critical in sensors with its
// thresholds, the SEL entry in events.
func TestHealthIPMI(t *testing.T) {
	t.Parallel()
	sim := ipmisim.StartTest(t, ipmisim.Options{
		Sensors: []ipmisim.Sensor{
			{Number: 1, Name: "CPU_Temp", Type: 0x01, Unit: 1, Raw: 45, UNC: 80, UCR: 90, UNR: 95},
			{Number: 2, Name: "FAN1", Type: 0x04, Unit: 18, M: 100, Raw: 3, LNR: 5, LCR: 10, LNC: 20},
		},
		SEL: []ipmisim.SELEvent{{SensorType: 0x04, Sensor: 2, Offset: 0x02, Reading: 3, Threshold: 10}},
	})
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	var creds agent.Credentials
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, &creds); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	testrig.StartAgentConfig(t, creds, agent.Config{PowerSyncInterval: 300 * time.Millisecond})
	var n testrig.Node
	if code := cl.Do("POST", "/v1/nodes", map[string]any{"name": "srv1", "driver": "ipmi", "conductor_group": "rack1", "driver_info": sim.DriverInfo()}, &n); code != 201 {
		t.Fatalf("create: %d", code)
	}
	cl.MustVerb(n.UUID, "manage", nil)
	if got := cl.WaitRest(n.UUID, 60*time.Second); got.State != "manageable" {
		t.Fatalf("manage: %q, last_error %q", got.State, got.LastError)
	}
	waitUntil(t, "health Critical", 30*time.Second, func() bool {
		status, body := curlDo(t, "http://"+c.APIAddr, "GET", "/v1/nodes/"+n.UUID+"?fields=health", "")
		return status == "200" && strings.Contains(body, `"health":"Critical"`)
	})
	var sn sensorsAnswer
	cl.Do("GET", "/v1/nodes/"+n.UUID+"/sensors", nil, &sn)
	var fan string
	for _, x := range sn.Sensors {
		if x.Name == "FAN1" && x.Reading != nil {
			fan = fmt.Sprintf("%s %s %v %s", x.Kind, x.Status, *x.Reading, x.Units)
		}
	}
	if fan != "fan Critical 300 RPM" {
		t.Errorf("FAN1: %q; want fan Critical 300 RPM (sensors %+v)", fan, sn.Sensors)
	}
	var ev eventsAnswer
	waitUntil(t, "the SEL entry", 30*time.Second, func() bool {
		cl.Do("GET", "/v1/nodes/"+n.UUID+"/events", nil, &ev)
		return len(ev.Events) > 0
	})
	if len(ev.Events) != 1 || !strings.Contains(ev.Events[0].Message, "Lower Critical - going low") || ev.Events[0].Severity == nil || *ev.Events[0].Severity != "Critical" {
		t.Errorf("events: %+v; want the fan's SEL entry", ev.Events)
	}
}

// historyText is the node's history events, one a line.
func historyText(cl *testrig.Client, id string) string {
	var h struct {
		History []map[string]any `json:"history"`
	}
	cl.Do("GET", "/v1/nodes/"+id+"/history", nil, &h)
	var b strings.Builder
	for _, e := range h.History {
		fmt.Fprintf(&b, "%v\n", e["event"])
	}
	return b.String()
}

// runCurl runs curl with args and returns its output.
func runCurl(args ...string) (string, error) {
	out, err := exec.Command("curl", args...).CombinedOutput()
	return string(out), err
}

// TestHealthThroughWANCut: the link between the site's edge agent and
// the coordinator is cut; meanwhile the BMC's system turns Critical and
// logs two entries. The coordinator, cut off, still shows OK and one
// entry; once the link returns it shows Critical with the readings
// taken during the outage (read_at before the link came back) and the
// two entries, from the agent's outbox.
func TestHealthThroughWANCut(t *testing.T) {
	t.Parallel()
	const pw = "pa55word"
	dir := hpeTree(t, "OK", "OK", 1, imlEntry)
	s, err := recorded.Start(recorded.Options{Fixture: dir, Username: "admin", Password: pw, Quirks: recorded.Profiles["hpe-ilo5-dl325"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	var link *testrig.WANLink
	cl, id, _ := healthRigVia(t, s, pw, func(broker string) string {
		u, err := url.Parse(broker)
		if err != nil {
			t.Fatal(err)
		}
		link = testrig.NewWANLink(t, u.Host)
		u.Host = link.Addr()
		return u.String()
	})
	health := func() any {
		var raw map[string]any
		cl.Do("GET", "/v1/nodes/"+id, nil, &raw)
		return raw["health"]
	}
	var ev eventsAnswer
	waitUntil(t, "health OK and the first entry", 30*time.Second, func() bool {
		cl.Do("GET", "/v1/nodes/"+id+"/events", nil, &ev)
		return health() == "OK" && len(ev.Events) == 1
	})
	link.Cut()
	s.Edit(hpeSystem, func(d map[string]any) {
		d["Status"] = map[string]any{"Health": "Critical", "HealthRollup": "Critical", "State": "Enabled"}
	})
	s.Edit(hpeSystem+"/LogServices/IML/Entries", func(d map[string]any) {
		d["Members"] = entriesDoc(3, imlEntry)["Members"]
	})
	// The site reads the Critical system and the new entries, in power
	// sync rounds (three reads of each); nothing reaches the coordinator.
	s.ResetRequests()
	waitUntil(t, "the site reads the changed BMC three times", time.Minute, func() bool {
		sys, entries := 0, 0
		for _, r := range s.Requests() {
			switch r {
			case "GET " + hpeSystem:
				sys++
			case "GET " + hpeSystem + "/LogServices/IML/Entries":
				entries++
			}
		}
		return sys >= 3 && entries >= 3
	})
	if h := health(); h != "OK" {
		t.Fatalf("health %v while the link is cut; the cut let a report through", h)
	}
	cl.Do("GET", "/v1/nodes/"+id+"/events", nil, &ev)
	if len(ev.Events) != 1 {
		t.Fatalf("%d events while the link is cut; want 1", len(ev.Events))
	}
	back := time.Now()
	link.Restore()
	waitUntil(t, "health Critical after the link returns", 60*time.Second, func() bool { return health() == "Critical" })
	waitUntil(t, "the two entries of the outage", 30*time.Second, func() bool {
		cl.Do("GET", "/v1/nodes/"+id+"/events", nil, &ev)
		return len(ev.Events) == 3
	})
	if ev.Events[1].ID != "IML/2" || ev.Events[2].ID != "IML/3" {
		t.Errorf("events after the outage: %+v", ev.Events)
	}
	var sn sensorsAnswer
	cl.Do("GET", "/v1/nodes/"+id+"/sensors", nil, &sn)
	if sn.ReadAt == nil {
		t.Fatal("no sensors")
	}
	// The report that brought Critical was read at the site during the
	// outage (later ones with the same statuses are not sent).
	if at, err := time.Parse(time.RFC3339Nano, *sn.ReadAt); err != nil || !at.Before(back) {
		t.Errorf("sensors read at %v (%v); want during the outage, before %s", *sn.ReadAt, err, back.Format(time.RFC3339Nano))
	}
}

// TestHealthPathsNeedCredentials: with http_basic on, the sensors and
// events of a node, and its health, are 401 to a client without
// credentials or with a wrong password (curl), and answered to one with
// them.
func TestHealthPathsNeedCredentials(t *testing.T) {
	t.Parallel()
	c := testrig.Coordinator(t, testrig.Options{Users: map[string]string{"ops": "pw1"}})
	cl := testrig.NewClient(t, c)
	if code := cl.Do("POST", "/v1/sites", map[string]string{"name": "rack1"}, nil); code != 201 {
		t.Fatalf("site add: %d", code)
	}
	id := cl.CreateNode("h1", "rack1", nil)
	base := "http://" + c.APIAddr
	for _, p := range []string{"/v1/nodes/" + id + "/sensors", "/v1/nodes/" + id + "/events", "/v1/nodes/" + id + "?fields=health"} {
		for _, auth := range [][]string{nil, {"-u", "ops:wrong"}} {
			args := append([]string{"-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", "X-OpenStack-Ironic-API-Version: 1.109"}, auth...)
			if out, err := runCurl(append(args, base+p)...); err != nil || out != "401" {
				t.Errorf("GET %s with %v: %v %s; want 401", p, auth, err, out)
			}
		}
		if out, err := runCurl("-sS", "-o", "/dev/null", "-w", "%{http_code}", "-u", "ops:pw1", "-H", "X-OpenStack-Ironic-API-Version: 1.109", base+p); err != nil || out != "200" {
			t.Errorf("GET %s with credentials: %v %s; want 200", p, err, out)
		}
	}
}
