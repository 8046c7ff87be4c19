package engine

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// A node's firmware components and BIOS settings, as its BMC reported
// them in a BMC command's result data (protocol.DataFirmware,
// protocol.DataBIOS): kept one record per node in the store, merged as
// Ironic's caches are (firmware: initial_version is the first version
// seen, a changed current_version is the last version flashed; BIOS:
// the settings read replace the old ones, each keeping its created_at).

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

// oobReport is what a BMC result carries for the node's records, read
// from its data outside the engine's loop.
type oobReport struct {
	firmware []FirmwareComponent // component and current version only
	bios     []BIOSSetting       // without times
	hasFW    bool
	hasBIOS  bool
}

// readOOBReport reads and bounds a result's firmware and BIOS data; nil
// when it has none (or only malformed data, which is dropped).
func readOOBReport(msg *protocol.Message) *oobReport {
	if msg.Kind != protocol.KindResult || !msg.OK || msg.Data == nil {
		return nil
	}
	var r oobReport
	if list, ok := msg.Data[protocol.DataFirmware].([]any); ok && len(list) <= protocol.MaxFirmwareComponents {
		r.hasFW = true
		seen := map[string]bool{}
		for _, it := range list {
			m, _ := it.(map[string]any)
			c, _ := m["component"].(string)
			v, _ := m["current_version"].(string)
			if c == "" || len(c) > 255 || len(v) > 255 || seen[c] {
				continue
			}
			seen[c] = true
			r.firmware = append(r.firmware, FirmwareComponent{Component: c, CurrentVersion: v})
		}
	}
	if list, ok := msg.Data[protocol.DataBIOS].([]any); ok && len(list) <= protocol.MaxBIOSSettings {
		r.hasBIOS = true
		seen := map[string]bool{}
		for _, it := range list {
			m, _ := it.(map[string]any)
			if s, ok := biosSetting(m); ok && !seen[s.Name] {
				seen[s.Name] = true
				r.bios = append(r.bios, s)
			}
		}
		sort.Slice(r.bios, func(i, j int) bool { return r.bios[i].Name < r.bios[j].Name })
	}
	if !r.hasFW && !r.hasBIOS {
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

// keepOOBReport merges a node's report into its records in the batch;
// called in the loop, for a result of the node's pending BMC command.
func (t *tx) keepOOBReport(n *fsm.Node, r *oobReport) {
	if r.hasFW {
		old, _ := t.e.loadFirmware(n.UUID)
		byName := map[string]*FirmwareComponent{}
		for i := range old {
			byName[old[i].Component] = &old[i]
		}
		for _, c := range r.firmware {
			o := byName[c.Component]
			if o == nil {
				old = append(old, FirmwareComponent{Component: c.Component, InitialVersion: c.CurrentVersion, CurrentVersion: c.CurrentVersion, CreatedAt: t.now})
				continue
			}
			if o.CurrentVersion != c.CurrentVersion {
				v := c.CurrentVersion
				o.LastVersionFlashed, o.CurrentVersion = &v, v
				now := t.now
				o.UpdatedAt = &now
			}
		}
		if b, err := json.Marshal(old); err == nil {
			t.batch.Set(store.FirmwarePrefix+n.UUID, b)
		}
	}
	if r.hasBIOS {
		old, _ := t.e.loadBIOS(n.UUID)
		byName := map[string]BIOSSetting{}
		for _, s := range old {
			byName[s.Name] = s
		}
		out := make([]BIOSSetting, 0, len(r.bios))
		for _, s := range r.bios {
			s.CreatedAt = t.now
			if o, ok := byName[s.Name]; ok {
				s.CreatedAt, s.UpdatedAt = o.CreatedAt, o.UpdatedAt
				if !sameValue(o.Value, s.Value) {
					now := t.now
					s.UpdatedAt = &now
				}
			}
			out = append(out, s)
		}
		if b, err := json.Marshal(out); err == nil {
			t.batch.Set(store.BIOSPrefix+n.UUID, b)
		}
	}
}

func sameValue(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func (e *Engine) loadFirmware(id string) ([]FirmwareComponent, error) {
	var out []FirmwareComponent
	b, found, err := e.st.Get(store.FirmwarePrefix + id)
	if err != nil || !found {
		return nil, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("corrupt firmware record of node %s: %w", id, err)
	}
	return out, nil
}

func (e *Engine) loadBIOS(id string) ([]BIOSSetting, error) {
	var out []BIOSSetting
	b, found, err := e.st.Get(store.BIOSPrefix + id)
	if err != nil || !found {
		return nil, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("corrupt BIOS record of node %s: %w", id, err)
	}
	return out, nil
}

// Firmware returns a node's firmware components (empty until its BMC
// reported them: at manage, after firmware.update), and its UUID.
func (e *Engine) Firmware(ident string) ([]FirmwareComponent, string, error) {
	var id string
	if err := e.View(ident, func(n *fsm.Node, _ bool) error { id = n.UUID; return nil }); err != nil {
		return nil, "", err
	}
	fw, err := e.loadFirmware(id)
	return fw, id, err
}

// BIOS returns a node's BIOS settings, sorted by name (empty until its
// BMC reported them: at manage, after the BIOS steps), and its UUID.
func (e *Engine) BIOS(ident string) ([]BIOSSetting, string, error) {
	var id string
	if err := e.View(ident, func(n *fsm.Node, _ bool) error { id = n.UUID; return nil }); err != nil {
		return nil, "", err
	}
	bs, err := e.loadBIOS(id)
	return bs, id, err
}
