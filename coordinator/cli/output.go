package cli

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"gopkg.in/yaml.v3"
)

// formats are the values of -f, as the baremetal CLI's: value prints
// bare values for scripts (a list's rows one per line with their values
// separated by spaces, a record's values one per line), as openstack
// clients' -f value does.
var formats = []string{"table", "json", "yaml", "value"}

func knownFormat(f string) bool {
	for _, x := range formats {
		if f == x {
			return true
		}
	}
	return false
}

// colKey makes "Provision State", "provision-state" and
// "provision_state" the same column, so that -c takes a table's header
// as well as the field's name.
func colKey(s string) string {
	return strings.NewReplacer(" ", "_", "-", "_").Replace(strings.ToLower(strings.TrimSpace(s)))
}

// pick resolves -c against the fields that can be shown, in the order
// given; with no -c it returns def.
func (c *cmd) pick(def []string, rows []map[string]any) ([]string, error) {
	if len(c.columns) == 0 {
		return def, nil
	}
	known := map[string]string{}
	for _, k := range def {
		known[colKey(k)] = k
	}
	for _, r := range rows {
		for k := range r {
			known[colKey(k)] = k
		}
	}
	var out []string
	for _, want := range c.columns {
		for _, w := range strings.Split(want, ",") {
			if w == "" {
				continue
			}
			k, ok := known[colKey(w)]
			if !ok && len(rows) > 0 {
				names := make([]string, 0, len(known))
				for _, n := range known {
					names = append(names, n)
				}
				sort.Strings(names)
				return nil, usagef("no column %q here; columns: %s", w, strings.Join(names, ", "))
			}
			if !ok {
				k = w
			}
			out = append(out, k)
		}
	}
	return out, nil
}

// only keeps cols of r.
func only(r map[string]any, cols []string) map[string]any {
	out := make(map[string]any, len(cols))
	for _, k := range cols {
		out[k] = r[k]
	}
	return out
}

// structured prints v as JSON or YAML.
func (c *cmd) structured(v any) error {
	if c.format == "yaml" {
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		fmt.Fprint(c.out, string(b))
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(c.out, string(b))
	return nil
}

// table prints rows with the given columns, or all their fields with -f
// json or yaml; -c picks the columns (fields) instead.
func (c *cmd) table(rows []map[string]any, cols []string) error {
	picked, err := c.pick(cols, rows)
	if err != nil {
		return err
	}
	if c.format == "value" {
		for _, r := range rows {
			vals := make([]string, len(picked))
			for i, col := range picked {
				vals[i] = valueCell(r[col])
			}
			fmt.Fprintln(c.out, strings.Join(vals, " "))
		}
		return nil
	}
	if c.format != "table" {
		if rows == nil {
			rows = []map[string]any{}
		}
		if len(c.columns) > 0 {
			out := make([]map[string]any, len(rows))
			for i, r := range rows {
				out[i] = only(r, picked)
			}
			rows = out
		}
		return c.structured(rows)
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	head := make([]string, len(picked))
	for i, col := range picked {
		head[i] = strings.ToUpper(strings.ReplaceAll(col, "_", " "))
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		vals := make([]string, len(picked))
		for i, col := range picked {
			vals[i] = cell(r[col])
		}
		fmt.Fprintln(tw, strings.Join(vals, "\t"))
	}
	return tw.Flush()
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return x
	case map[string]any, []any:
		b, _ := json.Marshal(x)
		return string(b)
	}
	return fmt.Sprint(v)
}

// valueCell is a value as -f value prints it: as openstack clients
// print them (None for a null, True and False), lists and objects as
// JSON, strings bare.
func valueCell(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return x
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case map[string]any, []any:
		b, _ := json.Marshal(x)
		return string(b)
	}
	return fmt.Sprint(v)
}

// record prints one object as field/value lines, or JSON or YAML; -c
// picks the fields.
func (c *cmd) record(v map[string]any) error {
	var keys []string
	for k := range v {
		if k != "links" && k != "ports" && k != "states" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	picked, err := c.pick(keys, []map[string]any{v})
	if err != nil {
		return err
	}
	if c.format == "value" {
		for _, k := range picked {
			fmt.Fprintln(c.out, valueCell(v[k]))
		}
		return nil
	}
	if c.format != "table" {
		if len(c.columns) > 0 {
			return c.structured(only(v, picked))
		}
		return c.structured(v)
	}
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	for _, k := range picked {
		fmt.Fprintf(tw, "%s\t%s\n", k, cell(v[k]))
	}
	return tw.Flush()
}
