package redfish_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/drivers/redfish"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// images serves firmware images on 127.0.0.1 and counts the downloads.
type images struct {
	URL  string
	mu   sync.Mutex
	hits map[string]int
}

func newImages(t *testing.T, files map[string][]byte) *images {
	im := &images{hits: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		im.mu.Lock()
		im.hits[r.URL.Path]++
		im.mu.Unlock()
		_, _ = w.Write(data)
	}))
	t.Cleanup(srv.Close)
	im.URL = srv.URL
	return im
}

func (im *images) count(p string) int {
	im.mu.Lock()
	defer im.mu.Unlock()
	return im.hits[p]
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func versions(t *testing.T, d *redfish.BMC) map[string]string {
	t.Helper()
	comps, err := d.FirmwareComponents(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, c := range comps {
		out[c.Component] = c.Version
	}
	return out
}

func (r *rig) oobOptions() redfish.Options {
	o := r.fastOptions()
	o.FirmwareVerifyTimeout = 300 * time.Millisecond
	return o
}

// TestFirmwareUpdate runs firmware.update against the vBMC: a BMC image
// (activated by the BMC reset the driver performs) and a BIOS image
// (activated by a system start, the power left off as it was), with a
// checksum; then a failing task, an image that never changes the
// version, a checksum mismatch (the BMC never gets the image) and the
// multipart push of a BMC without SimpleUpdate.
func TestFirmwareUpdate(t *testing.T) {
	bmc2 := vbmc.FirmwareImage(vbmc.ComponentBMC, "2.0")
	files := map[string][]byte{
		"/bmc-2.0.bin":   bmc2,
		"/bios-1.1.bin":  vbmc.FirmwareImage(vbmc.ComponentBIOS, "1.1.0"),
		"/nic-21.bin":    vbmc.FirmwareImage(vbmc.ComponentNIC, "21.0.0"),
		"/bios-fail.bin": vbmc.FirmwareImage(vbmc.ComponentBIOS, "9.9", "fail=flash write error at block 7"),
		"/bios-lies.bin": vbmc.FirmwareImage(vbmc.ComponentBIOS, "9.9", "apply=never"),
	}
	im := newImages(t, files)
	r := newRig(t, rigOptions{vbmc: vbmc.Config{UpdateDelay: 20 * time.Millisecond}})
	d := r.driver(t, r.oobOptions())
	c := ctx(t)

	before := versions(t, d)
	if before["bios"] != "1.0.0" || before["bmc"] != "1.0" || before["nic:NIC.Slot.1"] != "20.5.13" {
		t.Fatalf("versions before: %v", before)
	}
	settings := []any{
		map[string]any{"component": "bmc", "url": im.URL + "/bmc-2.0.bin", "checksum": sha(bmc2)},
		map[string]any{"component": "bios", "url": im.URL + "/bios-1.1.bin"},
	}
	if err := d.RunStep(c, "firmware", "update", map[string]any{"settings": settings}); err != nil {
		t.Fatal(err)
	}
	after := versions(t, d)
	if after["bmc"] != "2.0" || after["bios"] != "1.1.0" || after["nic:NIC.Slot.1"] != "20.5.13" {
		t.Fatalf("versions after: %v", after)
	}
	if r.bmc.ManagerResets() != 1 {
		t.Fatalf("manager resets = %d; the BMC image needs one", r.bmc.ManagerResets())
	}
	if r.machine.PoweredOn() || len(r.machine.Starts()) != 1 {
		t.Fatalf("the BIOS image needs one start and the power left off: on=%v starts=%v", r.machine.PoweredOn(), r.machine.Starts())
	}
	// The driver fetched the checksummed image once to verify it; the BMC fetched each once.
	if n := im.count("/bmc-2.0.bin"); n != 2 {
		t.Fatalf("bmc image fetched %d times; want 2 (driver's check, BMC)", n)
	}

	err := d.RunStep(c, "firmware", "update", map[string]any{"settings": []any{map[string]any{"component": "bios", "url": im.URL + "/bios-fail.bin"}}})
	mustContain(t, err, "firmware update 1 of 1 (bios", "ended Exception", "flash write error at block 7")
	err = d.RunStep(c, "firmware", "update", map[string]any{"settings": []any{map[string]any{"component": "bios", "url": im.URL + "/bios-lies.bin"}}})
	mustContain(t, err, "still reports version \"1.1.0\"", "the image did not apply")

	tasks := len(r.bmc.Tasks())
	err = d.RunStep(c, "firmware", "update", map[string]any{"settings": []any{map[string]any{"component": "bios", "url": im.URL + "/bios-1.1.bin", "checksum": sha(bmc2)}}})
	mustContain(t, err, "checksum is", "not the", "was not given to the BMC")
	if n := len(r.bmc.Tasks()); n != tasks {
		t.Fatalf("the BMC got an image whose checksum did not match (%d tasks, was %d)", n, tasks)
	}
	for _, bad := range []struct {
		settings any
		want     string
	}{
		{nil, "must be a non-empty list"},
		{[]any{map[string]any{"component": "disk", "url": im.URL + "/x"}}, `component "disk" is not bios, bmc or nic:<id>`},
		{[]any{map[string]any{"component": "bios", "url": "ftp://x/y"}}, "must be an http or https URL"},
		{[]any{map[string]any{"component": "bios", "url": im.URL + "/x", "checksum": "sha256:12"}}, "not <algorithm>:<hex>"},
		{[]any{map[string]any{"component": "bios", "url": im.URL + "/x", "flash": true}}, `unknown key "flash"`},
		{[]any{map[string]any{"component": "nic:NIC.Slot.9", "url": im.URL + "/nic-21.bin"}}, "reports no firmware component nic:NIC.Slot.9"},
	} {
		mustContain(t, d.RunStep(c, "firmware", "update", map[string]any{"settings": bad.settings}), bad.want)
	}

	// A BMC without SimpleUpdate gets the image pushed (multipart).
	r2 := newRig(t, rigOptions{vbmc: vbmc.Config{NoSimpleUpdate: true, UpdateDelay: 20 * time.Millisecond}})
	d2 := r2.driver(t, r2.oobOptions())
	if err := d2.RunStep(c, "firmware", "update", map[string]any{"settings": []any{map[string]any{"component": "nic:NIC.Slot.1", "url": im.URL + "/nic-21.bin"}}}); err != nil {
		t.Fatal(err)
	}
	if v := versions(t, d2); v["nic:NIC.Slot.1"] != "21.0.0" {
		t.Fatalf("after the pushed NIC image: %v", v)
	}
	if !strings.Contains(r2.logs.String(), "how=\"multipart push\"") {
		t.Fatalf("the driver did not push the image:\n%s", r2.logs.String())
	}
}

// TestHardwareRAID creates Ironic-shaped logical disks as Redfish volumes
// on the vBMC's controller and deletes them.
func TestHardwareRAID(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.oobOptions())
	c := ctx(t)
	cfg := map[string]any{"logical_disks": []any{
		map[string]any{"size_gb": "MAX", "raid_level": "0", "physical_disks": []any{"Disk.Bay.2", "Disk.Bay.3"}, "volume_name": "data"},
		map[string]any{"size_gb": 50.0, "raid_level": "1", "is_root_volume": true},
	}}
	if err := d.RunStep(c, "raid", "apply_configuration", map[string]any{"raid_config": cfg}); err != nil {
		t.Fatal(err)
	}
	vols, err := r.bmc.Volumes("1")
	if err != nil || len(vols) != 2 {
		t.Fatalf("volumes: %+v %v", vols, err)
	}
	// The root volume first, on the first free drives.
	if v := vols[0]; v.RAIDType != "RAID1" || v.CapacityBytes != 50<<30 || strings.Join(v.Drives, ",") != "Disk.Bay.0,Disk.Bay.1" {
		t.Fatalf("root volume: %+v", v)
	}
	if v := vols[1]; v.RAIDType != "RAID0" || v.CapacityBytes != 200<<30 || v.Name != "data" {
		t.Fatalf("data volume: %+v", v)
	}
	got, err := d.RAIDVolumes(c)
	if err != nil || len(got) != 2 || got[0].RAIDLevel != "1" || got[0].SizeGB != 50 || got[1].RAIDLevel != "0" || got[1].SizeGB != 200 ||
		got[1].Controller != "RAID.Integrated.1" || strings.Join(got[1].PhysicalDisks, ",") != "Disk.Bay.2,Disk.Bay.3" {
		t.Fatalf("RAIDVolumes: %+v %v", got, err)
	}
	for _, bad := range []struct {
		disk map[string]any
		want string
	}{
		{map[string]any{"size_gb": 10.0, "raid_level": "1", "physical_disks": []any{"Disk.Bay.0", "Disk.Bay.2"}}, "drive Disk.Bay.0 belongs to volume"},
		{map[string]any{"size_gb": 10.0, "raid_level": "5"}, "does not offer RAID5 (it offers RAID0, RAID1, RAID10)"},
		{map[string]any{"size_gb": "MAX", "raid_level": "1"}, "\"MAX\" needs physical_disks"},
		{map[string]any{"size_gb": 10.0, "raid_level": "1", "controller": "RAID.Slot.9"}, "no storage controller matches"},
		{map[string]any{"size_gb": 10.0, "raid_level": "1", "physical_disks": []any{"Disk.Bay.7"}}, "has no drive Disk.Bay.7"},
		{map[string]any{"size_gb": 10.0, "raid_level": "3"}, "raid_level 3 is not one of"},
		{map[string]any{"size_gb": 10.0, "raid_level": "1", "sparkle": true}, `unknown key "sparkle"`},
	} {
		err := d.RunStep(c, "raid", "apply_configuration", map[string]any{"raid_config": map[string]any{"logical_disks": []any{bad.disk}}, "delete_existing": false})
		mustContain(t, err, bad.want)
	}
	// 60 GiB of RAID1 on two 100 GiB drives, more than the free drives
	// can hold as a 300 GiB RAID0: the BMC's refusal is quoted.
	err = d.RunStep(c, "raid", "apply_configuration", map[string]any{"raid_config": map[string]any{"logical_disks": []any{
		map[string]any{"size_gb": 300.0, "raid_level": "0", "physical_disks": []any{"Disk.Bay.0", "Disk.Bay.1"}}}}})
	mustContain(t, err, "PropertyValueOutOfRange")
	if vols, _ := r.bmc.Volumes("1"); len(vols) != 0 {
		t.Fatalf("apply_configuration deletes the existing volumes by default; left %+v", vols)
	}
	if err := d.RunStep(c, "raid", "apply_configuration", map[string]any{"raid_config": cfg, "create_nonroot_volumes": false}); err != nil {
		t.Fatal(err)
	}
	if vols, _ := r.bmc.Volumes("1"); len(vols) != 1 || vols[0].RAIDType != "RAID1" {
		t.Fatalf("create_nonroot_volumes=false: %+v", vols)
	}
	if err := d.RunStep(c, "raid", "delete_configuration", nil); err != nil {
		t.Fatal(err)
	}
	if vols, _ := r.bmc.Volumes("1"); len(vols) != 0 {
		t.Fatalf("after delete_configuration: %+v", vols)
	}
}

// TestBIOSSettingsWithRegistry reads the BIOS attributes with the
// registry's fields (Ironic's API 1.74 names); the vBMC checks a PATCH
// against the registry.
func TestBIOSSettingsWithRegistry(t *testing.T) {
	r := newRig(t, rigOptions{})
	d := r.driver(t, r.oobOptions())
	c := ctx(t)
	settings, err := d.BIOSSettings(c)
	if err != nil {
		t.Fatal(err)
	}
	by := map[string]drivers.BIOSSetting{}
	for _, s := range settings {
		by[s.Name] = s
	}
	pv := by["ProcVirtualization"]
	if pv.Value != "Enabled" || pv.AttributeType != "Enumeration" || strings.Join(pv.AllowableValues, ",") != "Enabled,Disabled" || pv.ResetRequired == nil || !*pv.ResetRequired {
		t.Fatalf("ProcVirtualization: %+v", pv)
	}
	bd := by["BootDelaySeconds"]
	if bd.AttributeType != "Integer" || bd.LowerBound == nil || *bd.LowerBound != 0 || bd.UpperBound == nil || *bd.UpperBound != 60 {
		t.Fatalf("BootDelaySeconds: %+v", bd)
	}
	tag := by["SystemServiceTag"]
	if tag.ReadOnly == nil || !*tag.ReadOnly || tag.Unique == nil || !*tag.Unique || tag.MaxLength == nil || *tag.MaxLength != 16 {
		t.Fatalf("SystemServiceTag: %+v", tag)
	}
	js, _ := json.Marshal(bd)
	for _, k := range []string{`"attribute_type":"Integer"`, `"lower_bound":0`, `"upper_bound":60`, `"reset_required":true`} {
		if !strings.Contains(string(js), k) {
			t.Fatalf("BIOS setting JSON %s lacks %s", js, k)
		}
	}
	mustContain(t, d.RunStep(c, "bios", "apply_configuration", map[string]any{"settings": []any{map[string]any{"name": "BootDelaySeconds", "value": 99.0}}}),
		"outside its bounds [0, 60]")
	mustContain(t, d.RunStep(c, "bios", "apply_configuration", map[string]any{"settings": []any{map[string]any{"name": "SystemServiceTag", "value": "X"}}}),
		"read-only")
	mustContain(t, d.RunStep(c, "bios", "apply_configuration", map[string]any{"settings": []any{map[string]any{"name": "NumLock", "value": "Blinking"}}}),
		"not one of its allowable values")
}

// requireSushy returns Debian's python3 when it can import sushy.
func requireSushy(t *testing.T) string {
	t.Helper()
	const py = "/usr/bin/python3"
	err := exec.Command(py, "-c", "import sushy").Run()
	if err == nil {
		return py
	}
	if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatalf("python3-sushy is not usable with %s (%v); run scripts/install-test-deps.sh", py, err)
	}
	t.Skipf("python3-sushy is not usable with %s (%v); run scripts/install-test-deps.sh (make test does)", py, err)
	return ""
}

// TestSushyReadsBackFirmwareRAIDAndBIOS: after the driver updated the
// BMC's firmware, created volumes and staged a BIOS setting applied at a
// reboot, python3-sushy (an independent client) reads the same back.
func TestSushyReadsBackFirmwareRAIDAndBIOS(t *testing.T) {
	py := requireSushy(t)
	im := newImages(t, map[string][]byte{"/bmc.bin": vbmc.FirmwareImage(vbmc.ComponentBMC, "3.1")})
	r := newRig(t, rigOptions{vbmc: vbmc.Config{UpdateDelay: 20 * time.Millisecond}})
	d := r.driver(t, r.oobOptions())
	c := ctx(t)
	if err := d.RunStep(c, "firmware", "update", map[string]any{"settings": []any{map[string]any{"component": "bmc", "url": im.URL + "/bmc.bin"}}}); err != nil {
		t.Fatal(err)
	}
	cfg := map[string]any{"logical_disks": []any{map[string]any{"size_gb": 40.0, "raid_level": "1+0", "is_root_volume": true}}}
	if err := d.RunStep(c, "raid", "apply_configuration", map[string]any{"raid_config": cfg}); err != nil {
		t.Fatal(err)
	}
	if err := d.RunStep(c, "bios", "apply_configuration", map[string]any{"settings": []any{map[string]any{"name": "BootDelaySeconds", "value": 12.0}}}); err != nil {
		t.Fatal(err)
	}
	if err := d.SetPower(c, "rebooted"); err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs("testdata/sushy_readback.py")
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(sctx, py, script, r.url, "admin", password)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sushy: %v\n%s", err, stderr.String())
	}
	var got struct {
		BIOSVersion string            `json:"bios_version"`
		BMCVersion  string            `json:"bmc_version"`
		Inventory   map[string]string `json:"inventory"`
		Volumes     []struct {
			RAIDType      string `json:"raid_type"`
			CapacityBytes int64  `json:"capacity_bytes"`
			Controller    string `json:"controller"`
		} `json:"volumes"`
		BIOS     map[string]any `json:"bios"`
		Registry map[string]struct {
			Type            string   `json:"type"`
			ReadOnly        bool     `json:"read_only"`
			UpperBound      *int64   `json:"upper_bound"`
			AllowableValues []string `json:"allowable_values"`
		} `json:"registry"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("sushy's output %q: %v", out, err)
	}
	if got.BMCVersion != "3.1" || got.Inventory["BMC"] != "3.1" || got.BIOSVersion != "1.0.0" || got.Inventory["NIC.Slot.1"] != "20.5.13" {
		t.Fatalf("sushy's firmware: %+v", got)
	}
	if len(got.Volumes) != 1 || got.Volumes[0].RAIDType != "RAID10" || got.Volumes[0].CapacityBytes != 40<<30 || got.Volumes[0].Controller != "RAID.Integrated.1" {
		t.Fatalf("sushy's volumes: %+v", got.Volumes)
	}
	if got.BIOS["BootDelaySeconds"] != 12.0 {
		t.Fatalf("sushy's BIOS attributes: %v", got.BIOS)
	}
	bd, tag, nl := got.Registry["BootDelaySeconds"], got.Registry["SystemServiceTag"], got.Registry["NumLock"]
	if bd.Type != "Integer" || bd.UpperBound == nil || *bd.UpperBound != 60 || !tag.ReadOnly || strings.Join(nl.AllowableValues, ",") != "On,Off" {
		t.Fatalf("sushy's registry: %+v", got.Registry)
	}
}
