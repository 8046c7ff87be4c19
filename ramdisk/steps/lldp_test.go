package steps

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	liblldp "github.com/bmedge/bmedge/lib/lldp"
	"github.com/bmedge/bmedge/ramdisk/inventory"
	"github.com/bmedge/bmedge/ramdisk/lldp"
)

// TestListenLLDPInInventory: inspection listens on the physical NICs
// with a link only, records the frame each heard as the interface's
// lldp (Ironic Python Agent's raw form), and a NIC that could not
// listen as a warning.
func TestListenLLDPInInventory(t *testing.T) {
	chassis, _ := net.ParseMAC("02:00:5e:00:00:01")
	var asked []string
	r := &Runner{LLDP: func(_ context.Context, names []string) map[string]lldp.Result {
		asked = names
		return map[string]lldp.Result{"eno1": {TLVs: liblldp.Basic(chassis, "Ethernet1/7", "", "sw-01")}, "eno2": {Err: errors.New("eno2: permission denied")}}
	}}
	inv := inventory.Inventory{Interfaces: []inventory.Interface{{Name: "eno1", HasCarrier: true}, {Name: "eno2", HasCarrier: true},
		{Name: "eno3"}, {Name: "br0", HasCarrier: true, Virtual: true}}}
	r.listenLLDP(context.Background(), &inv)
	if !slices.Equal(asked, []string{"eno1", "eno2"}) {
		t.Fatalf("listened on %v, want the physical NICs with a link", asked)
	}
	if len(inv.Interfaces[0].LLDP) != 4 || inv.Interfaces[1].LLDP != nil || len(inv.Warnings) != 1 || !strings.Contains(inv.Warnings[0], "permission denied") {
		t.Fatalf("inventory %+v", inv)
	}
}
