package vbmc

import (
	"fmt"
	"sort"
)

// The BIOS attribute registry: what each attribute of DefaultBiosAttributes
// is (type, allowable values, bounds, read-only, reset required), served
// under /redfish/v1/Registries as real BMCs do, and used to check a
// Bios/Settings PATCH. Attributes a system has that the registry does not
// describe are typed from their default value.

const biosRegistryID = "BiosAttributeRegistry.v1_0_0"

// RegistryAttribute describes one BIOS attribute, as Redfish's
// AttributeRegistry entry.
type RegistryAttribute struct {
	Type          string   // Enumeration, String, Integer, Boolean
	Values        []string // Enumeration's allowable values
	Lower, Upper  *int64
	MinLen        *int64
	MaxLen        *int64
	ReadOnly      bool
	ResetRequired bool
	Unique        bool
}

func i64(v int64) *int64 { return &v }

// biosRegistry describes DefaultBiosAttributes.
var biosRegistry = map[string]RegistryAttribute{
	"ProcVirtualization": {Type: "Enumeration", Values: []string{"Enabled", "Disabled"}, ResetRequired: true},
	"ProcTurboMode":      {Type: "Enumeration", Values: []string{"Enabled", "Disabled"}, ResetRequired: true},
	"SriovGlobalEnable":  {Type: "Enumeration", Values: []string{"Enabled", "Disabled"}, ResetRequired: true},
	"PxeDev1EnDis":       {Type: "Enumeration", Values: []string{"Enabled", "Disabled"}, ResetRequired: true},
	"NumLock":            {Type: "Enumeration", Values: []string{"On", "Off"}, ResetRequired: true},
	"TimeZone":           {Type: "String", MinLen: i64(1), MaxLen: i64(32), ResetRequired: false},
	"BootDelaySeconds":   {Type: "Integer", Lower: i64(0), Upper: i64(60), ResetRequired: true},
	"SecureBootEnable":   {Type: "Boolean", ResetRequired: true},
	"SystemServiceTag":   {Type: "String", ReadOnly: true, Unique: true, MaxLen: i64(16)},
}

// registryAttr returns the registry entry of an attribute of s, typed
// from its default when the registry does not list it.
func registryAttr(s *system, name string) (RegistryAttribute, bool) {
	if a, ok := biosRegistry[name]; ok {
		return a, true
	}
	v, ok := s.biosDefaults[name]
	if !ok {
		return RegistryAttribute{}, false
	}
	switch v.(type) {
	case bool:
		return RegistryAttribute{Type: "Boolean", ResetRequired: true}, true
	case float64:
		return RegistryAttribute{Type: "Integer", ResetRequired: true}, true
	}
	return RegistryAttribute{Type: "String", ResetRequired: true}, true
}

// checkAttr says why value is not acceptable for the attribute, or "".
func checkAttr(name string, a RegistryAttribute, v any) string {
	if a.ReadOnly {
		return fmt.Sprintf("the attribute %s is read-only", name)
	}
	switch a.Type {
	case "Enumeration":
		str, _ := v.(string)
		if !contains(a.Values, str) {
			return fmt.Sprintf("the value %v of %s is not one of its allowable values %v", v, name, a.Values)
		}
	case "String":
		str, ok := v.(string)
		if !ok {
			return fmt.Sprintf("the value %v of %s is not a string", v, name)
		}
		if a.MinLen != nil && int64(len(str)) < *a.MinLen || a.MaxLen != nil && int64(len(str)) > *a.MaxLen {
			return fmt.Sprintf("the value of %s has %d characters, outside its bounds", name, len(str))
		}
	case "Integer":
		f, ok := v.(float64)
		if !ok || f != float64(int64(f)) {
			return fmt.Sprintf("the value %v of %s is not an integer", v, name)
		}
		if a.Lower != nil && int64(f) < *a.Lower || a.Upper != nil && int64(f) > *a.Upper {
			return fmt.Sprintf("the value %v of %s is outside its bounds [%s, %s]", v, name, bound(a.Lower), bound(a.Upper))
		}
	case "Boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Sprintf("the value %v of %s is not a boolean", v, name)
		}
	}
	return ""
}

func bound(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func (b *BMC) registryCollection() any {
	return collection("#MessageRegistryFileCollection.MessageRegistryFileCollection", "Registry File Collection",
		root+"/Registries", []string{root + "/Registries/" + biosRegistryID})
}

func (b *BMC) registryFile() any {
	return map[string]any{
		"@odata.type": "#MessageRegistryFile.v1_1_0.MessageRegistryFile",
		"@odata.id":   root + "/Registries/" + biosRegistryID,
		"Id":          biosRegistryID,
		"Name":        "BIOS Attribute Registry File",
		"Languages":   []string{"en"},
		"Registry":    biosRegistryID,
		"Location": []any{map[string]any{
			"Language": "en",
			"Uri":      root + "/Registries/" + biosRegistryID + "/BiosAttributeRegistry",
		}},
	}
}

// registryResource lists the attributes of the first system: the
// systems of one BMC share their BIOS.
func (b *BMC) registryResource() any {
	s := b.systems[0]
	b.mu.Lock()
	names := map[string]bool{}
	for k := range s.biosDefaults {
		names[k] = true
	}
	defaults := copyMap(s.biosDefaults)
	b.mu.Unlock()
	for k := range biosRegistry {
		names[k] = true
	}
	var sorted []string
	for k := range names {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var attrs []any
	for _, k := range sorted {
		a, ok := registryAttr(s, k)
		if !ok {
			a = biosRegistry[k]
		}
		e := map[string]any{
			"AttributeName":          k,
			"DisplayName":            k,
			"Type":                   a.Type,
			"ReadOnly":               a.ReadOnly,
			"ResetRequired":          a.ResetRequired,
			"IsSystemUniqueProperty": a.Unique,
		}
		if d, ok := defaults[k]; ok {
			e["DefaultValue"] = d
		}
		if a.Type == "Enumeration" {
			var vals []any
			for _, v := range a.Values {
				vals = append(vals, map[string]any{"ValueName": v, "ValueDisplayName": v})
			}
			e["Value"] = vals
		}
		for key, p := range map[string]*int64{"LowerBound": a.Lower, "UpperBound": a.Upper, "MinLength": a.MinLen, "MaxLength": a.MaxLen} {
			if p != nil {
				e[key] = *p
			}
		}
		attrs = append(attrs, e)
	}
	return map[string]any{
		"@odata.type":      "#AttributeRegistry.v1_3_0.AttributeRegistry",
		"@odata.id":        root + "/Registries/" + biosRegistryID + "/BiosAttributeRegistry",
		"Id":               biosRegistryID,
		"Name":             "BIOS Attribute Registry",
		"Language":         "en",
		"OwningEntity":     "bmedge",
		"RegistryVersion":  "1.0.0",
		"SupportedSystems": []any{map[string]any{"ProductName": "vBMC virtual system", "SystemId": "VBMC"}},
		"RegistryEntries":  map[string]any{"Attributes": attrs},
	}
}
