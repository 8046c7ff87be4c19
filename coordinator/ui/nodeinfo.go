package ui

import (
	"fmt"
	"strings"

	"github.com/bmedge/bmedge/drivers"
)

// inventoryView is what the node page shows of a node's inventory (what
// its ramdisk reported on inspection).
type inventoryView struct {
	CPU, Memory, System, BootMode string
	Disks                         []disk
	NICs                          []nic
}

type disk struct{ Name, Size, Model, Serial, Kind string }

type nic struct{ Name, MAC, IP string }

func str(m map[string]any, k string) string {
	switch v := m[k].(type) {
	case string:
		return v
	case float64:
		return fmt.Sprintf("%.0f", v)
	case bool:
		return fmt.Sprint(v)
	}
	return ""
}

func sub(m map[string]any, k string) map[string]any {
	v, _ := m[k].(map[string]any)
	return v
}

func list(m map[string]any, k string) []map[string]any {
	var out []map[string]any
	l, _ := m[k].([]any)
	for _, x := range l {
		if o, ok := x.(map[string]any); ok {
			out = append(out, o)
		}
	}
	return out
}

// viewInventory reads an inventory as Ironic's inspection stores it
// (cpu, memory, disks, interfaces, system_vendor, boot); nil when there
// is none.
func viewInventory(inv map[string]any) *inventoryView {
	if inv == nil {
		return nil
	}
	v := &inventoryView{}
	if c := sub(inv, "cpu"); c != nil {
		v.CPU = strings.TrimSpace(fmt.Sprintf("%s × %s %s", str(c, "count"), str(c, "model_name"), str(c, "architecture")))
	}
	if m := sub(inv, "memory"); m != nil {
		if mb := str(m, "physical_mb"); mb != "" {
			v.Memory = mb + " MiB"
		}
	}
	if s := sub(inv, "system_vendor"); s != nil {
		v.System = strings.TrimSpace(strings.Join([]string{str(s, "manufacturer"), str(s, "product_name"), "serial " + str(s, "serial_number")}, " "))
	}
	if b := sub(inv, "boot"); b != nil {
		v.BootMode = str(b, "current_boot_mode")
	}
	for _, d := range list(inv, "disks") {
		kind := "SSD"
		if r, _ := d["rotational"].(bool); r {
			kind = "HDD"
		}
		size := ""
		if f, ok := d["size"].(float64); ok {
			size = byteSize(int64(f))
		}
		v.Disks = append(v.Disks, disk{Name: str(d, "name"), Size: size, Model: str(d, "model"), Serial: str(d, "serial"), Kind: kind})
	}
	for _, n := range list(inv, "interfaces") {
		v.NICs = append(v.NICs, nic{Name: str(n, "name"), MAC: str(n, "mac_address"), IP: str(n, "ipv4_address")})
	}
	return v
}

// stepsView is the node's clean steps as the steps API lists them.
type stepsView struct {
	Steps []drivers.Step
	// Known is false while the node's ramdisk has not reported its
	// in-band steps (only the out-of-band ones are listed then).
	Known bool
}
