package configdrive

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// needTool returns the path of a Debian tool, or skips (fails under
// BM_REQUIRE_ALL=1).
func needTool(t *testing.T, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("%s is missing (Debian package %s; scripts/install-test-deps.sh installs it)", name, pkg)
		}
		t.Skipf("%s is missing: install Debian's %s (scripts/install-test-deps.sh)", name, pkg)
	}
	return p
}

// needCloudInit skips unless Debian's cloud-init is importable by /usr/bin/python3.
func needCloudInit(t *testing.T) {
	t.Helper()
	if err := exec.Command("/usr/bin/python3", "-c", "import cloudinit.sources.DataSourceConfigDrive").Run(); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatalf("cloud-init is missing (Debian package cloud-init; scripts/install-test-deps.sh installs it): %v", err)
		}
		t.Skip("cloud-init is missing: install Debian's cloud-init (scripts/install-test-deps.sh)")
	}
}

// readWithCloudInit runs cloud-init's own config drive reader on dir and
// returns what it found.
func readWithCloudInit(t *testing.T, dir string) map[string]any {
	t.Helper()
	script := `import json, sys
from cloudinit.sources.DataSourceConfigDrive import read_config_drive
r = read_config_drive(sys.argv[1])
ud = r.get('userdata')
if isinstance(ud, bytes): ud = ud.decode()
print(json.dumps({'metadata': r['metadata'], 'networkdata': r.get('networkdata'), 'userdata': ud, 'vendordata': r.get('vendordata2')}, default=str))`
	out, err := exec.Command("/usr/bin/python3", "-c", script, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("cloud-init's read_config_drive on %s: %v\n%s", dir, err, out)
	}
	var v map[string]any
	if err := json.Unmarshal(out[strings.LastIndexByte(strings.TrimSpace(string(out)), '\n')+1:], &v); err != nil {
		t.Fatalf("cloud-init's answer %q: %v", out, err)
	}
	return v
}

// TestBuildReadByCloudInit builds a config drive from the JSON form and
// has xorriso (an independent ISO 9660 reader, with Rock Ridge) extract
// it and cloud-init's own reader read it: hostname, key, network and
// user data as sent, the node's uuid and name as Ironic's defaults.
func TestBuildReadByCloudInit(t *testing.T) {
	xorriso := needTool(t, "xorriso", "xorriso")
	needCloudInit(t)
	raw := json.RawMessage(`{"meta_data": {"hostname": "web-1", "public_keys": {"ops": "ssh-ed25519 AAAAC3Nza ops@example"}},
		"network_data": {"links": [{"id": "eth0", "type": "phy", "ethernet_mac_address": "52:54:00:12:34:56"}],
			"networks": [{"id": "n0", "type": "ipv4", "link": "eth0", "ip_address": "192.0.2.10", "netmask": "255.255.255.0",
				"routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "192.0.2.1"}]}], "services": []},
		"user_data": {"runcmd": ["true"]}, "vendor_data": {"k": "v"}}`)
	p, err := Parse(raw, true, true)
	if err != nil || p.Kind != KindJSON {
		t.Fatalf("Parse: %+v %v", p, err)
	}
	enc, err := Build(p.Spec, Node{UUID: "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", Name: "node-7"})
	if err != nil {
		t.Fatal(err)
	}
	img, err := Decode(enc)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	iso := filepath.Join(dir, "cd.iso")
	if err := os.WriteFile(iso, img, 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(xorriso, "-indev", iso, "-pvd_info").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Volume Id    : config-2") {
		t.Fatalf("xorriso -pvd_info: %v\n%s", err, out)
	}
	x := filepath.Join(dir, "x")
	if out, err := exec.Command(xorriso, "-osirrox", "on", "-indev", iso, "-extract", "/", x).CombinedOutput(); err != nil {
		t.Fatalf("xorriso extract: %v\n%s", err, out)
	}
	for _, f := range []string{"openstack/latest/meta_data.json", "openstack/latest/user_data", "openstack/latest/network_data.json",
		"openstack/latest/vendor_data2.json", "openstack/2012-08-10/meta_data.json"} {
		if _, err := os.Stat(filepath.Join(x, f)); err != nil {
			t.Errorf("extracted config drive lacks %s (Rock Ridge names): %v", f, err)
		}
	}
	got := readWithCloudInit(t, x)
	md, _ := got["metadata"].(map[string]any)
	if md["hostname"] != "web-1" || md["uuid"] != "1be26c0b-03f2-4d2e-ae87-c02d7f33c123" || md["name"] != "node-7" {
		t.Errorf("cloud-init metadata %v: want hostname web-1, the node's uuid and name", md)
	}
	if !strings.Contains(jsonText(md["public_keys"]), "ssh-ed25519 AAAAC3Nza ops@example") {
		t.Errorf("cloud-init metadata has no public key: %v", md)
	}
	if !strings.Contains(jsonText(got["networkdata"]), "192.0.2.10") {
		t.Errorf("cloud-init network data %v: want the static address", got["networkdata"])
	}
	if got["userdata"] != `{"runcmd":["true"]}` {
		t.Errorf("cloud-init user data %q, want the object as JSON", got["userdata"])
	}
}

func jsonText(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestNodeDefaults: the node's network_data is used when the config drive
// has none; the meta_data's own uuid, name and hostname win.
func TestNodeDefaults(t *testing.T) {
	nd := map[string]any{"links": []any{map[string]any{"id": "x"}}}
	files, err := Files(&Spec{MetaData: map[string]any{"uuid": "mine", "hostname": "h"}}, Node{UUID: "u", Name: "n", NetworkData: nd})
	if err != nil {
		t.Fatal(err)
	}
	var md map[string]any
	json.Unmarshal(files["openstack/latest/meta_data.json"], &md)
	if md["uuid"] != "mine" || md["hostname"] != "h" || md["name"] != "n" {
		t.Errorf("meta_data %v", md)
	}
	if string(files["openstack/latest/network_data.json"]) != `{"links":[{"id":"x"}]}` {
		t.Errorf("network_data.json %s, want the node's", files["openstack/latest/network_data.json"])
	}
	files, _ = Files(&Spec{NetworkData: map[string]any{"links": []any{}}, UserData: nil}, Node{UUID: "u"})
	if _, ok := files["openstack/latest/user_data"]; ok {
		t.Error("user_data written without user data")
	}
	var md2 map[string]any
	json.Unmarshal(files["openstack/latest/meta_data.json"], &md2)
	if _, ok := md2["hostname"]; ok {
		t.Errorf("hostname without a node name: %v", md2)
	}
}

// TestParseRefusals: each malformed config drive is refused with a
// message saying what was wrong.
func TestParseRefusals(t *testing.T) {
	small, _ := Encode(mustISO(t))
	notDrive, _ := Encode([]byte("hello"))
	for _, c := range []struct {
		raw       string
		json, vd  bool
		wantInErr string
	}{
		{`{"meta_data": {}}`, false, false, "1.56"},
		{`{"vendor_data": {}}`, true, false, "1.59"},
		{`{"meta_data": []}`, true, true, "meta_data must be a JSON object"},
		{`{"user_data": 5}`, true, true, "user_data must be"},
		{`{"hostname": "x"}`, true, true, `unknown key "hostname"`},
		{`"ftp://example.com/cd"`, true, true, "http:// or https://"},
		{`"not base64 !"`, true, true, "neither a JSON, nor a URL, nor a base64 string"},
		{`"aGVsbG8="`, true, true, "not gzip"},
		{`"` + notDrive + `"`, true, true, "neither an ISO 9660 nor a VFAT"},
		{`"` + strings.Repeat("A", MaxEncodedBytes+4) + `"`, true, true, "524288 bytes (512 KiB)"},
		{`5`, true, true, "must be a JSON object"},
	} {
		_, err := Parse(json.RawMessage(c.raw), c.json, c.vd)
		var e *Error
		if !errors.As(err, &e) || !strings.Contains(err.Error(), c.wantInErr) {
			t.Errorf("Parse(%.60s): %v, want an *Error containing %q", c.raw, err, c.wantInErr)
		}
	}
	for _, ok := range []string{`"` + small + `"`, `"https://images.example/cd.gz?sig=1"`, `null`, `{}`, `""`} {
		if _, err := Parse(json.RawMessage(ok), true, true); err != nil {
			t.Errorf("Parse(%.60s): %v", ok, err)
		}
	}
	// A gzip bomb: more than 64 MiB once decompressed.
	big, _ := Encode(make([]byte, MaxImageBytes+1))
	if _, err := Parse(json.RawMessage(`"`+big+`"`), true, true); err == nil || !strings.Contains(err.Error(), "64 MiB") {
		t.Errorf("a config drive of 64 MiB + 1 decompressed: %v", err)
	}
	// A JSON form whose drive is too large to carry.
	huge := make([]byte, 600<<10)
	rand.Read(huge)
	rnd := json.RawMessage(`{"user_data": ` + jsonText(hex.EncodeToString(huge)) + `}`)
	p, err := Parse(rnd, true, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Build(p.Spec, Node{UUID: "u"}); err == nil || !strings.Contains(err.Error(), "512 KiB") {
		t.Errorf("Build of an oversized drive: %v", err)
	}
}

func mustISO(t *testing.T) []byte {
	b, err := BuildISO(Label, map[string][]byte{"openstack/latest/meta_data.json": []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBondsReadByCloudInit: a node's port groups, with no network_data
// given, become bonds of the config drive's network_data.json, which
// cloud-init's own converter (convert_net_json, the one its config drive
// source uses) turns into a bond of the two ports with its mode and
// miimon.
func TestBondsReadByCloudInit(t *testing.T) {
	needCloudInit(t)
	files, err := Files(&Spec{}, Node{UUID: "u1", Bonds: []Bond{{Name: "bond0", Mode: "802.3ad",
		Properties: map[string]any{"miimon": "100"}, Ports: []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}}}})
	if err != nil {
		t.Fatal(err)
	}
	nd := files["openstack/latest/network_data.json"]
	script := `import json, sys
from cloudinit.sources.helpers.openstack import convert_net_json
print(json.dumps(convert_net_json(json.loads(sys.argv[1]), known_macs={'52:54:00:00:00:01': 'eth0', '52:54:00:00:00:02': 'eth1'})))`
	out, err := exec.Command("/usr/bin/python3", "-c", script, string(nd)).CombinedOutput()
	if err != nil {
		t.Fatalf("cloud-init's convert_net_json on %s: %v\n%s", nd, err, out)
	}
	var cfg struct {
		Config []struct {
			Type       string         `json:"type"`
			Name       string         `json:"name"`
			Params     map[string]any `json:"params"`
			Interfaces []string       `json:"bond_interfaces"`
			Subnets    []struct {
				Type string `json:"type"`
			} `json:"subnets"`
		} `json:"config"`
	}
	if err := json.Unmarshal(out[strings.LastIndexByte(strings.TrimSpace(string(out)), '\n')+1:], &cfg); err != nil {
		t.Fatalf("cloud-init's answer %q: %v", out, err)
	}
	found := false
	for _, c := range cfg.Config {
		if c.Type == "bond" {
			found = c.Name == "bond0" && c.Params["bond_mode"] == "802.3ad" && c.Params["bond_miimon"] == "100" &&
				strings.Join(c.Interfaces, ",") == "eth0,eth1" && len(c.Subnets) == 1 && c.Subnets[0].Type == "dhcp4"
		}
	}
	if !found {
		t.Fatalf("cloud-init read %s as %s; want bond0 of eth0 and eth1, 802.3ad, miimon 100, DHCP", nd, out)
	}
}
