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

// registryFiles reads the service's registry files (the Registries
// collection's members), in parallel.
func (b *BMC) registryFiles(c *gofish.APIClient) ([]registryFileDoc, error) {
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
	files := make([]registryFileDoc, len(col.Members))
	errs := make([]error, len(col.Members))
	var fns []func()
	for i, m := range col.Members {
		fns = append(fns, func() { errs[i] = getJSON(c, m.ID, &files[i]) })
	}
	parallel(fns...)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

// biosRegistry reads the attribute registry named name from its file
// among files; nil when the BMC does not serve it (the settings then
// have no registry fields).
func (b *BMC) biosRegistry(c *gofish.APIClient, name string, files []registryFileDoc) (map[string]registryAttrDoc, error) {
	if name == "" {
		return nil, nil
	}
	for _, f := range files {
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
	ctx, cancel := reserve(reading(ctx))
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer b.unlock()
	if bios, w, err, ok := b.takeBIOS(); ok {
		return bios, w, err
	}
	var out []drivers.BIOSSetting
	var warnings []string
	err := b.do(ctx, "read BIOS settings", func(c *gofish.APIClient) error {
		var err error
		out, warnings, err = b.biosReading(c)
		return err
	})
	return out, warnings, err
}

// biosReading is BIOSReading's work, for a caller holding the lock.
func (b *BMC) biosReading(c *gofish.APIClient) ([]drivers.BIOSSetting, []string, error) {
	// The registry files do not depend on the Bios resource: both at once.
	var doc *biosDoc
	var files []registryFileDoc
	var err, ferr error
	parallel(
		func() { doc, err = b.readBios(c) },
		func() { files, ferr = b.registryFiles(c) },
	)
	if err != nil {
		return nil, nil, err
	}
	if doc.Attributes == nil {
		return nil, nil, fmt.Errorf("the Bios resource %s has no Attributes", doc.ID)
	}
	var warnings []string
	var reg map[string]registryAttrDoc
	if err = ferr; err == nil {
		reg, err = b.biosRegistry(c, doc.AttributeRegistry, files)
	}
	if err != nil {
		if st := statusOf(err); st == http.StatusUnauthorized || st == http.StatusForbidden {
			return nil, nil, err
		}
		warnings = append(warnings, fmt.Sprintf("bios registry %s: %s", doc.AttributeRegistry, b.explain(err)))
		reg = nil
	}
	var out []drivers.BIOSSetting
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
	return out, warnings, nil
}
