package fsm

import (
	"encoding/json"
	"strings"
)

// SecureBootRequested tells whether a node boots with UEFI Secure Boot, as
// Ironic's capabilities ask for it: secure_boot "true" in
// instance_info/capabilities (a map, or its JSON text), else in
// properties/capabilities (Ironic's "key:value,key:value" text, or a
// map). The boot commands of such a node say so (protocol.ArgSecureBoot):
// network boot then gives UEFI firmware the signed chain.
func SecureBootRequested(n *Node) bool {
	if v, ok := capability(n.InstanceInfo["capabilities"], "secure_boot"); ok {
		return strings.EqualFold(v, "true")
	}
	v, _ := capability(n.Properties["capabilities"], "secure_boot")
	return strings.EqualFold(v, "true")
}

// capability reads one key of capabilities given as a map, a JSON object's
// text, or Ironic's "key:value,key:value" text.
func capability(caps any, key string) (string, bool) {
	switch c := caps.(type) {
	case map[string]any:
		v, ok := c[key]
		if !ok {
			return "", false
		}
		switch x := v.(type) {
		case string:
			return x, true
		case bool:
			if x {
				return "true", true
			}
			return "false", true
		}
		return "", false
	case string:
		c = strings.TrimSpace(c)
		if strings.HasPrefix(c, "{") {
			var m map[string]any
			if json.Unmarshal([]byte(c), &m) != nil {
				return "", false
			}
			return capability(m, key)
		}
		for _, kv := range strings.Split(c, ",") {
			if k, v, ok := strings.Cut(kv, ":"); ok && strings.TrimSpace(k) == key {
				return strings.TrimSpace(v), true
			}
		}
	}
	return "", false
}

// takeBootMode records the boot section of an inspection's inventory:
// boot.current_boot_mode ("uefi" or "bios") and boot.secure_boot (the
// ramdisk read the firmware's SecureBoot variable). What the inventory
// leaves out is left as it was.
func takeBootMode(n *Node, inv map[string]any) {
	b, _ := inv["boot"].(map[string]any)
	if b == nil {
		return
	}
	if m, _ := b["current_boot_mode"].(string); m == "uefi" || m == "bios" {
		n.BootMode = m
	}
	if sb, ok := b["secure_boot"].(bool); ok {
		n.SecureBoot = &sb
	}
}

// nodeBootMode is the boot mode a node asks for, as Ironic's
// boot_mode_utils.get_boot_mode reads it: boot_mode in
// instance_info/capabilities, else in properties/capabilities, in lower
// case ("" when neither says: Ironic's default, uefi).
func nodeBootMode(n *Node) string {
	if v, ok := capability(n.InstanceInfo["capabilities"], "boot_mode"); ok {
		return strings.ToLower(v)
	}
	v, _ := capability(n.Properties["capabilities"], "boot_mode")
	return strings.ToLower(v)
}
