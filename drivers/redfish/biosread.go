package redfish

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/stmcginnis/gofish"

	"github.com/bmedge/bmedge/drivers"
)

var _ drivers.BIOSReader = (*BMC)(nil)

// BIOS settings with their registry fields, as Ironic's redfish BIOS
// interface caches them (API 1.74): the Bios resource names its
// AttributeRegistry; the service root's Registries lead to its file,
// whose English (or default, or first) location holds the entries.

type registryFileDoc struct {
	ID       string `json:"Id"`
	Registry string `json:"Registry"`
	Location []struct {
		Language string `json:"Language"`
		URI      string `json:"Uri"`
	} `json:"Location"`
}

type registryAttrDoc struct {
	AttributeName          string `json:"AttributeName"`
	Type                   string `json:"Type"`
	ReadOnly               *bool  `json:"ReadOnly"`
	ResetRequired          *bool  `json:"ResetRequired"`
	IsSystemUniqueProperty *bool  `json:"IsSystemUniqueProperty"`
	LowerBound             *int64 `json:"LowerBound"`
	UpperBound             *int64 `json:"UpperBound"`
	MinLength              *int64 `json:"MinLength"`
	MaxLength              *int64 `json:"MaxLength"`
	Value                  []struct {
		ValueName string `json:"ValueName"`
	} `json:"Value"`
}

type registryDoc struct {
	RegistryEntries struct {
		Attributes []registryAttrDoc `json:"Attributes"`
	} `json:"RegistryEntries"`
}

// biosRegistry finds and reads the attribute registry named name; nil
// when the BMC does not serve it (the settings then have no registry fields).
func (b *BMC) biosRegistry(c *gofish.APIClient, name string) (map[string]registryAttrDoc, error) {
	if name == "" {
		return nil, nil
	}
	var root serviceRootDoc
	if err := getJSON(c, "/redfish/v1/", &root); err != nil {
		return nil, err
	}
	if root.Registries.ID == "" {
		return nil, nil
	}
	var col collectionDoc
	if err := getJSON(c, root.Registries.ID, &col); err != nil {
		return nil, err
	}
	if len(col.Members) > 256 {
		col.Members = col.Members[:256]
	}
	for _, m := range col.Members {
		var f registryFileDoc
		if err := getJSON(c, m.ID, &f); err != nil {
			return nil, err
		}
		if f.Registry != name && f.ID != name {
			continue
		}
		uri := ""
		for _, pass := range []string{"en", "default", ""} {
			for _, l := range f.Location {
				if uri == "" && l.URI != "" && (pass == "" || strings.EqualFold(l.Language, pass)) {
					uri = l.URI
				}
			}
		}
		if uri == "" {
			return nil, nil
		}
		var reg registryDoc
		if err := getJSON(c, uri, &reg); err != nil {
			return nil, err
		}
		out := map[string]registryAttrDoc{}
		for _, a := range reg.RegistryEntries.Attributes {
			out[a.AttributeName] = a
		}
		return out, nil
	}
	return nil, nil
}

// BIOSSettings reads the current BIOS attributes with their registry
// fields, sorted by name; a registry that cannot be read is logged and
// costs only the registry fields (BIOSReading returns it).
func (b *BMC) BIOSSettings(ctx context.Context) ([]drivers.BIOSSetting, error) {
	out, warnings, err := b.BIOSReading(ctx)
	for _, w := range warnings {
		b.log.Warn("redfish BIOS reading is partial", "missing", w)
	}
	return out, err
}

// BIOSReading reads the BIOS settings and names what could not be read
// besides them. A BIOS the BMC does not serve is an error, never an
// empty success.
func (b *BMC) BIOSReading(ctx context.Context) ([]drivers.BIOSSetting, []string, error) {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer b.unlock()
	var out []drivers.BIOSSetting
	var warnings []string
	err := b.do(ctx, "read BIOS settings", func(c *gofish.APIClient) error {
		doc, err := b.readBios(c)
		if err != nil {
			return err
		}
		if doc.Attributes == nil {
			return fmt.Errorf("the Bios resource %s has no Attributes", doc.ID)
		}
		warnings = nil
		reg, err := b.biosRegistry(c, doc.AttributeRegistry)
		if err != nil {
			if st := statusOf(err); st == http.StatusUnauthorized || st == http.StatusForbidden {
				return err
			}
			warnings = append(warnings, fmt.Sprintf("bios registry %s: %s", doc.AttributeRegistry, b.explain(err)))
			reg = nil
		}
		out = nil
		for name, v := range doc.Attributes {
			s := drivers.BIOSSetting{Name: name, Value: v}
			if a, ok := reg[name]; ok {
				s.AttributeType = a.Type
				s.ReadOnly, s.ResetRequired, s.Unique = a.ReadOnly, a.ResetRequired, a.IsSystemUniqueProperty
				s.LowerBound, s.UpperBound, s.MinLength, s.MaxLength = a.LowerBound, a.UpperBound, a.MinLength, a.MaxLength
				for _, x := range a.Value {
					s.AllowableValues = append(s.AllowableValues, x.ValueName)
				}
			}
			out = append(out, s)
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
		return nil
	})
	return out, warnings, err
}
