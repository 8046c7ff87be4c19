package engine

import (
	"encoding/json"
	"fmt"
	"maps"

	"github.com/google/uuid"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
)

// PluginDataKey is the key under which a stored inventory keeps its
// plugin data (fsm Output.PluginData: where an out-of-band inspection's
// inventory came from, what it could not read); the API shows it as
// the inventory endpoint's plugin_data, beside the inventory.
const PluginDataKey = "plugin_data"

// storeInventory writes the node's inventory, with its plugin data.
func (t *tx) storeInventory(n *fsm.Node, out fsm.Output) {
	inv := out.Inventory
	if sv, ok := inv["system_vendor"].(map[string]any); ok {
		// Discovery knows the machine again by it.
		if s := fsm.SerialOf(sv); s != n.Serial {
			n.Serial = s
			t.dirty[n.UUID] = n
		}
	}
	if out.PluginData != nil {
		inv = maps.Clone(inv)
		inv[PluginDataKey] = out.PluginData
	}
	b, _ := json.Marshal(inv)
	t.batch.Set(store.InventoryPrefix+n.UUID, b)
}

// inspectedPorts creates a port for each MAC an out-of-band inspection
// found that no port has (Ironic's inspection creates the ports of the
// MACs it discovers, pxe_enabled as a new port is); a MAC that is
// another node's port is left to it, with a warning in this node's
// history. The caller holds e.reg.mu (the loop).
func (t *tx) inspectedPorts(n *fsm.Node, macs []string) {
	e := t.e
	for _, addr := range macs {
		if id, ok := e.reg.macs[addr]; ok {
			if p := e.reg.ports[id]; p != nil && p.NodeUUID != n.UUID {
				t.addHistory(n, fsm.HistoryEntry{Time: t.now, Severity: "WARNING", EventType: "inspection",
					Event: fmt.Sprintf("inspection found MAC %s, which is a port of node %s already; no port made for node %s", addr, p.NodeUUID, n.Ident())})
			}
			continue
		}
		p := &Port{UUID: uuid.NewString(), Address: addr, NodeUUID: n.UUID, Extra: map[string]any{}, PXE: true, CreatedAt: t.now}
		e.addPort(t, p)
		t.addHistory(n, fsm.HistoryEntry{Time: t.now, Severity: "INFO", EventType: "inspection",
			Event: fmt.Sprintf("port %s created for MAC %s found by inspection", p.UUID, addr)})
	}
}
