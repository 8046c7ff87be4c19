package vbmc_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/lib/waitfor"
)

// TestUpdateAndVolumeRefusals checks what the vBMC refuses in updates and
// volumes, and that a BMC image waits for the manager reset.
func TestUpdateAndVolumeRefusals(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/bmc.bin":
			_, _ = w.Write(vbmc.FirmwareImage(vbmc.ComponentBMC, "5.0"))
		case "/junk.bin":
			_, _ = w.Write([]byte("MZ\x90\x00 not firmware"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	l := newLab(t, vbmc.Config{UpdateDelay: time.Millisecond})
	const su = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
	wait := func(loc string) map[string]any {
		var r reply
		if !waitfor.Until(5*time.Second, func() bool {
			r = l.call(t, "GET", loc, "basic", nil)
			if r.body["TaskState"] == "Running" && r.status != http.StatusAccepted {
				t.Fatalf("a running task answers %d; want 202 as a task monitor", r.status)
			}
			return r.body["TaskState"] != "Running"
		}) {
			t.Fatal("the task never ended")
		}
		if r.status != http.StatusOK {
			t.Fatalf("a finished task answers %d", r.status)
		}
		return r.body
	}
	for _, c := range []struct {
		body   map[string]any
		status int
		id     string
	}{
		{map[string]any{"ImageURI": "ftp://x/y"}, 400, "Base.1.8.ActionParameterValueFormatError"},
		{map[string]any{"ImageURI": srv.URL + "/bmc.bin", "TransferProtocol": "HTTPS"}, 400, "Base.1.8.ActionParameterValueConflict"},
		{map[string]any{"ImageURI": srv.URL + "/bmc.bin", "Targets": []any{"/redfish/v1/UpdateService/FirmwareInventory/GPU"}}, 400, "Base.1.8.ActionParameterValueError"},
		{map[string]any{"ImageURI": srv.URL + "/bmc.bin", "Force": true}, 400, "Base.1.8.ActionParameterUnknown"},
	} {
		if r := l.call(t, "POST", su, "basic", c.body); r.status != c.status || errorID(r) != c.id {
			t.Errorf("SimpleUpdate %v: %d %s; want %d %s", c.body, r.status, errorID(r), c.status, c.id)
		}
	}
	// An image for another component than the target, and one that is
	// not firmware, end in Exception.
	for _, body := range []map[string]any{
		{"ImageURI": srv.URL + "/bmc.bin", "Targets": []any{"/redfish/v1/UpdateService/FirmwareInventory/BIOS"}},
		{"ImageURI": srv.URL + "/junk.bin"},
		{"ImageURI": srv.URL + "/missing.bin"},
	} {
		r := l.call(t, "POST", su, "basic", body)
		if r.status != http.StatusAccepted || r.header.Get("Location") == "" {
			t.Fatalf("SimpleUpdate: %d %v", r.status, r.body)
		}
		if end := wait(r.header.Get("Location")); end["TaskState"] != "Exception" {
			t.Fatalf("task for %v: %v", body, end)
		}
	}
	r := l.call(t, "POST", su, "basic", map[string]any{"ImageURI": srv.URL + "/bmc.bin"})
	if end := wait(r.header.Get("Location")); end["TaskState"] != "Completed" {
		t.Fatalf("BMC image task: %v", end)
	}
	if m := l.call(t, "GET", "/redfish/v1/Managers/BMC", "basic", nil); m.body["FirmwareVersion"] != "1.0" {
		t.Fatalf("the BMC version changed before the manager reset: %v", m.body["FirmwareVersion"])
	}
	l.call(t, "POST", "/redfish/v1/Managers/BMC/Actions/Manager.Reset", "basic", map[string]any{"ResetType": "GracefulRestart"})
	if inv := l.call(t, "GET", "/redfish/v1/UpdateService/FirmwareInventory/BMC", "basic", nil); inv.body["Version"] != "5.0" {
		t.Fatalf("after the manager reset: %v", inv.body)
	}

	vols := "/redfish/v1/Systems/1/Storage/RAID.Integrated.1/Volumes"
	drive := func(ids ...string) map[string]any {
		var l []any
		for _, id := range ids {
			l = append(l, map[string]any{"@odata.id": "/redfish/v1/Systems/1/Storage/RAID.Integrated.1/Drives/" + id})
		}
		return map[string]any{"Drives": l}
	}
	for _, c := range []struct {
		body   map[string]any
		status int
		id     string
	}{
		{map[string]any{"RAIDType": "RAID5", "Links": drive("Disk.Bay.0", "Disk.Bay.1", "Disk.Bay.2")}, 400, "Base.1.8.PropertyValueNotInList"},
		{map[string]any{"RAIDType": "RAID10", "Links": drive("Disk.Bay.0", "Disk.Bay.1")}, 400, "Base.1.8.ActionParameterValueError"},
		{map[string]any{"RAIDType": "RAID1", "Links": drive("Disk.Bay.0", "Disk.Bay.9")}, 400, "Base.1.8.ResourceMissingAtURI"},
		{map[string]any{"RAIDType": "RAID1"}, 400, "Base.1.8.PropertyMissing"},
		{map[string]any{"RAIDType": "RAID1", "CapacityBytes": 101.0 * (1 << 30), "Links": drive("Disk.Bay.0", "Disk.Bay.1")}, 400, "Base.1.8.PropertyValueOutOfRange"},
		{map[string]any{"RAIDType": "RAID10", "Links": drive("Disk.Bay.0", "Disk.Bay.1", "Disk.Bay.2", "Disk.Bay.3")}, 201, ""},
	} {
		if r := l.call(t, "POST", vols, "basic", c.body); r.status != c.status || errorID(r) != c.id {
			t.Errorf("volume %v: %d %s; want %d %s", c.body, r.status, errorID(r), c.status, c.id)
		}
	}
	v, _ := l.bmc.Volumes("1")
	if len(v) != 1 || v[0].CapacityBytes != 200<<30 {
		t.Fatalf("RAID10 over four 100 GiB drives: %+v", v)
	}
	if r := l.call(t, "DELETE", vols+"/"+v[0].ID, "basic", nil); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d", r.status)
	}
	if r := l.call(t, "DELETE", vols+"/"+v[0].ID, "basic", nil); r.status != http.StatusNotFound {
		t.Fatalf("second delete: %d", r.status)
	}
}
