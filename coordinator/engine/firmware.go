package engine

import (
	"encoding/json"

	"github.com/bmedge/bmedge/coordinator/engine/readings"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// A node's firmware components and BIOS settings are package readings';
// the engine writes what it merges in the batch of the result.

// FirmwareComponent is one firmware component of a node, in Ironic's
// shape (API 1.86).
type FirmwareComponent = readings.FirmwareComponent

// BIOSSetting is one BIOS setting of a node, in Ironic's shape (API 1.40,
// registry fields 1.74).
type BIOSSetting = readings.BIOSSetting

// keepOOBReport merges a node's report into its records in the batch;
// called in the loop, for a result of the node's pending BMC command.
func (t *tx) keepOOBReport(n *fsm.Node, r *readings.Report) {
	if r.HasFW {
		old, _ := readings.LoadFirmware(t.e.st, n.UUID)
		if b, err := json.Marshal(readings.MergeFirmware(old, r, t.now)); err == nil {
			t.batch.Set(store.FirmwarePrefix+n.UUID, b)
		}
	}
	if r.HasBIOS {
		old, _ := readings.LoadBIOS(t.e.st, n.UUID)
		if b, err := json.Marshal(readings.MergeBIOS(old, r, t.now)); err == nil {
			t.batch.Set(store.BIOSPrefix+n.UUID, b)
		}
	}
}

// Firmware returns a node's firmware components (empty until its BMC
// reported them: at manage, after firmware.update), and its UUID.
func (e *Engine) Firmware(ident string) ([]FirmwareComponent, string, error) {
	var id string
	if err := e.View(ident, func(n *fsm.Node, _ bool) error { id = n.UUID; return nil }); err != nil {
		return nil, "", err
	}
	fw, err := readings.LoadFirmware(e.st, id)
	return fw, id, err
}

// BIOS returns a node's BIOS settings, sorted by name (empty until its
// BMC reported them: at manage, after the BIOS steps), and its UUID.
func (e *Engine) BIOS(ident string) ([]BIOSSetting, string, error) {
	var id string
	if err := e.View(ident, func(n *fsm.Node, _ bool) error { id = n.UUID; return nil }); err != nil {
		return nil, "", err
	}
	bs, err := readings.LoadBIOS(e.st, id)
	return bs, id, err
}
