package readings

import (
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// A report is read and bounded (duplicates and nameless entries
// dropped), and merged as Ironic's caches are: a changed version is the
// last one flashed, a changed BIOS value moves updated_at, a setting
// keeps its created_at.
func TestReadAndMerge(t *testing.T) {
	msg := &protocol.Message{Kind: protocol.KindResult, OK: true, Data: map[string]any{
		protocol.DataFirmware: []any{
			map[string]any{"component": "bmc", "current_version": "1.0"},
			map[string]any{"component": "bmc", "current_version": "9.9"},
			map[string]any{"current_version": "x"},
		},
		protocol.DataBIOS: []any{
			map[string]any{"name": "SriovEnable", "value": true},
			map[string]any{"name": "ProcTurbo", "value": "Enabled", "read_only": false},
		},
	}}
	r := Read(msg)
	if r == nil || !r.HasFW || !r.HasBIOS || len(r.Firmware) != 1 || len(r.BIOS) != 2 {
		t.Fatalf("report %+v", r)
	}
	if r.BIOS[0].Name != "ProcTurbo" || *r.BIOS[1].Value != "True" {
		t.Fatalf("BIOS %+v %+v", r.BIOS[0], r.BIOS[1])
	}
	t0, t1 := time.Unix(100, 0), time.Unix(200, 0)
	fw := MergeFirmware(nil, r, t0)
	bios := MergeBIOS(nil, r, t0)
	r2 := Read(&protocol.Message{Kind: protocol.KindResult, OK: true, Data: map[string]any{
		protocol.DataFirmware: []any{map[string]any{"component": "bmc", "current_version": "2.0"}},
		protocol.DataBIOS:     []any{map[string]any{"name": "SriovEnable", "value": false}},
	}})
	fw = MergeFirmware(fw, r2, t1)
	if fw[0].InitialVersion != "1.0" || fw[0].CurrentVersion != "2.0" || *fw[0].LastVersionFlashed != "2.0" || !fw[0].UpdatedAt.Equal(t1) {
		t.Fatalf("firmware %+v", fw[0])
	}
	bios = MergeBIOS(bios, r2, t1)
	if len(bios) != 1 || !bios[0].CreatedAt.Equal(t0) || !bios[0].UpdatedAt.Equal(t1) || *bios[0].Value != "False" {
		t.Fatalf("BIOS %+v", bios)
	}
	if Read(&protocol.Message{Kind: protocol.KindResult, OK: true, Data: map[string]any{}}) != nil {
		t.Fatal("a report from a result without readings")
	}
}
