// Package readings keeps what a node's BMC reported of its firmware
// components and BIOS settings (protocol.DataFirmware, protocol.DataBIOS
// in a BMC command's result): it reads and bounds a report, merges it
// into the node's records as Ironic's caches are merged (firmware:
// initial_version is the first version seen, a changed current_version
// is the last version flashed; BIOS: the settings read replace the old
// ones, each keeping its created_at), and reads the records back. The
// engine writes the merged records in its batch.
package readings

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// FirmwareComponent is one firmware component of a node, in Ironic's
// shape (API 1.86).
type FirmwareComponent struct {
	Component          string     `json:"component"`
	InitialVersion     string     `json:"initial_version"`
	CurrentVersion     string     `json:"current_version"`
	LastVersionFlashed *string    `json:"last_version_flashed"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          *time.Time `json:"updated_at"`
}

// BIOSSetting is one BIOS setting of a node, in Ironic's shape (API 1.40,
// registry fields 1.74). Value is a string, as Ironic stores it.
type BIOSSetting struct {
	Name            string     `json:"name"`
	Value           *string    `json:"value"`
	AttributeType   *string    `json:"attribute_type"`
	AllowableValues []string   `json:"allowable_values"`
	LowerBound      *int64     `json:"lower_bound"`
	UpperBound      *int64     `json:"upper_bound"`
	MinLength       *int64     `json:"min_length"`
	MaxLength       *int64     `json:"max_length"`
	ReadOnly        *bool      `json:"read_only"`
	ResetRequired   *bool      `json:"reset_required"`
	Unique          *bool      `json:"unique"`
	CreatedAt       time.Time  `json:"created_at"`
	UpdatedAt       *time.Time `json:"updated_at"`
}

// Report is what a BMC result carries for the node's records, read
// from its data outside the engine's loop.
type Report struct {
	Firmware []FirmwareComponent // component and current version only
	BIOS     []BIOSSetting       // without times
	HasFW    bool
	HasBIOS  bool
}

// Read reads and bounds a result's firmware and BIOS data; nil
// when it has none (or only malformed data, which is dropped).
func Read(msg *protocol.Message) *Report {
	if msg.Kind != protocol.KindResult || !msg.OK || msg.Data == nil {
		return nil
	}
	var r Report
	if list, ok := msg.Data[protocol.DataFirmware].([]any); ok && len(list) <= protocol.MaxFirmwareComponents {
		r.HasFW = true
		seen := map[string]bool{}
		for _, it := range list {
			m, _ := it.(map[string]any)
			c, _ := m["component"].(string)
			v, _ := m["current_version"].(string)
			if c == "" || len(c) > 255 || len(v) > 255 || seen[c] {
				continue
			}
			seen[c] = true
			r.Firmware = append(r.Firmware, FirmwareComponent{Component: c, CurrentVersion: v})
		}
	}
	if list, ok := msg.Data[protocol.DataBIOS].([]any); ok && len(list) <= protocol.MaxBIOSSettings {
		r.HasBIOS = true
		seen := map[string]bool{}
		for _, it := range list {
			m, _ := it.(map[string]any)
			if s, ok := biosSetting(m); ok && !seen[s.Name] {
				seen[s.Name] = true
				r.BIOS = append(r.BIOS, s)
			}
		}
		sort.Slice(r.BIOS, func(i, j int) bool { return r.BIOS[i].Name < r.BIOS[j].Name })
	}
	if !r.HasFW && !r.HasBIOS {
		return nil
	}
	return &r
}

// biosSetting reads one reported setting (drivers.BIOSSetting's JSON).
func biosSetting(m map[string]any) (BIOSSetting, bool) {
	name, _ := m["name"].(string)
	if name == "" || len(name) > 255 {
		return BIOSSetting{}, false
	}
	s := BIOSSetting{Name: name}
	switch v := m["value"].(type) {
	case string:
		s.Value = &v
	case bool:
		// Ironic's StringField: Python's str(True).
		str := "False"
		if v {
			str = "True"
		}
		s.Value = &str
	case float64:
		str := strconv.FormatFloat(v, 'f', -1, 64)
		s.Value = &str
	}
	if t, ok := m["attribute_type"].(string); ok && t != "" {
		s.AttributeType = &t
	}
	if l, ok := m["allowable_values"].([]any); ok {
		for _, x := range l {
			if str, ok := x.(string); ok {
				s.AllowableValues = append(s.AllowableValues, str)
			}
		}
	}
	num := func(k string) *int64 {
		if f, ok := m[k].(float64); ok && f >= 0 && f <= 1<<53 {
			n := int64(f)
			return &n
		}
		return nil
	}
	flag := func(k string) *bool {
		if b, ok := m[k].(bool); ok {
			return &b
		}
		return nil
	}
	s.LowerBound, s.UpperBound, s.MinLength, s.MaxLength = num("lower_bound"), num("upper_bound"), num("min_length"), num("max_length")
	s.ReadOnly, s.ResetRequired, s.Unique = flag("read_only"), flag("reset_required"), flag("unique")
	return s, true
}

// MergeFirmware merges a report's firmware into the node's components
// as stored (old), at now.
func MergeFirmware(old []FirmwareComponent, r *Report, now time.Time) []FirmwareComponent {
	byName := map[string]*FirmwareComponent{}
	for i := range old {
		byName[old[i].Component] = &old[i]
	}
	for _, c := range r.Firmware {
		o := byName[c.Component]
		if o == nil {
			old = append(old, FirmwareComponent{Component: c.Component, InitialVersion: c.CurrentVersion, CurrentVersion: c.CurrentVersion, CreatedAt: now})
			continue
		}
		if o.CurrentVersion != c.CurrentVersion {
			v := c.CurrentVersion
			o.LastVersionFlashed, o.CurrentVersion = &v, v
			at := now
			o.UpdatedAt = &at
		}
	}
	return old
}

// MergeBIOS gives the node's settings after a report: the settings read,
// each keeping the created_at (and, unchanged, updated_at) it had.
func MergeBIOS(old []BIOSSetting, r *Report, now time.Time) []BIOSSetting {
	byName := map[string]BIOSSetting{}
	for _, s := range old {
		byName[s.Name] = s
	}
	out := make([]BIOSSetting, 0, len(r.BIOS))
	for _, s := range r.BIOS {
		s.CreatedAt = now
		if o, ok := byName[s.Name]; ok {
			s.CreatedAt, s.UpdatedAt = o.CreatedAt, o.UpdatedAt
			if !sameValue(o.Value, s.Value) {
				at := now
				s.UpdatedAt = &at
			}
		}
		out = append(out, s)
	}
	return out
}

func sameValue(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// LoadFirmware reads a node's firmware record (nil when none).
func LoadFirmware(rd store.Reader, id string) ([]FirmwareComponent, error) {
	var out []FirmwareComponent
	b, found, err := rd.Get(store.FirmwarePrefix + id)
	if err != nil || !found {
		return nil, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("corrupt firmware record of node %s: %w", id, err)
	}
	return out, nil
}

// LoadBIOS reads a node's BIOS record (nil when none).
func LoadBIOS(rd store.Reader, id string) ([]BIOSSetting, error) {
	var out []BIOSSetting
	b, found, err := rd.Get(store.BIOSPrefix + id)
	if err != nil || !found {
		return nil, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("corrupt BIOS record of node %s: %w", id, err)
	}
	return out, nil
}
