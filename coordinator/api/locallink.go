package api

import (
	"reflect"

	"github.com/bmedge/bmedge/coordinator/engine"
)

// A port's local_link_connection (API 1.19): the switch port its NIC is
// cabled to, which inspection fills from the LLDP frame the NIC heard
// (switch_id, port_id, switch_info; coordinator/inspectrules), never
// overwriting a key the port has. It is shown on every port; an operator
// cannot set it (create and PATCH refuse it: the coordinator configures
// no switch from it, its network interface being noop) but may remove
// it or a key of it (PATCH remove), which the next inspection fills
// again: after a NIC is cabled to another switch port.

// minorLocalLink is the version of local_link_connection.
const minorLocalLink = 19

// removedLocalLink is a PATCH's local_link_connection (patched) when it
// only removed keys of the port's (cur); anything set or changed is
// refused.
func removedLocalLink(cur map[string]any, patched any) (map[string]any, error) {
	m, _ := patched.(map[string]any)
	if patched != nil && m == nil {
		return nil, &engine.Error{Kind: engine.Invalid, Msg: "local_link_connection can only be removed (PATCH remove): inspection fills it from LLDP"}
	}
	for k, v := range m {
		if old, ok := cur[k]; !ok || !reflect.DeepEqual(old, v) {
			return nil, &engine.Error{Kind: engine.Invalid, Msg: "local_link_connection cannot be set here: inspection fills it from the LLDP frames each NIC hears; remove it (or a key of it) with PATCH remove, and inspect the node again"}
		}
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}
