package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// This file holds `coordinator deploy-template` and what `runbook`
// shares with it (runbook.go): steps from JSON, a file or standard input,
// K=V extras, and the commands on one named record.

const templateLong = `A deploy template adds deploy steps to the deploys that ask for it: a deploy
whose node has instance_info traits naming the template (instance_info/traits,
a list of trait names), and that has each of those traits itself (node trait add),
runs the template's steps with the driver's, by priority. A template step
overrides the driver's step of the same interface and step (priority 0 disables
it); a step in the deploy's own deploy_steps overrides the template's.

NAME is a trait name: CUSTOM_ followed by capital letters, digits and
underscores (CUSTOM_BIOS_TUNED), or a standard os-traits name. Each step has
interface, step, args and priority, as Ironic's deploy templates (API 1.55):

  [{"interface": "bios", "step": "apply_configuration",
    "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]},
    "priority": 150}]

The deploy takes the templates as they are when it starts.`

// readJSONArg reads what a --steps flag names: JSON text, a file, or -
// for standard input (as the baremetal CLI's --steps).
func (c *cmd) readJSONArg(flag, v string) (any, error) {
	var b []byte
	var err error
	switch {
	case v == "-":
		b, err = io.ReadAll(io.LimitReader(c.stdin, 1<<20))
	case strings.HasPrefix(strings.TrimSpace(v), "[") || strings.HasPrefix(strings.TrimSpace(v), "{"):
		b = []byte(v)
	default:
		b, err = os.ReadFile(v)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read --%s: %v", flag, err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("--%s is not valid JSON: %v", flag, err)
	}
	return out, nil
}

// extraValues turns K=V flags into an object (V as JSON when it parses,
// else as a string, as node set --extra does).
func extraValues(m kv) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		var x any
		if json.Unmarshal([]byte(v), &x) == nil {
			out[k] = x
		} else {
			out[k] = v
		}
	}
	return out
}

// catalogKind is a kind of named record: deploy templates or runbooks.
type catalogKind struct {
	cmd        string // deploy-template
	what       string // deploy template
	collection string // deploy_templates
	arg        string // TEMPLATE
	listCols   []string
	longCols   []string
	example    string // a steps list
}

func (k catalogKind) path(id string) string {
	p := "/v1/" + k.collection
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	return p
}

func (c *cmd) catalogList(k catalogKind) *cobra.Command {
	var long bool
	cc := clientCmd(&cobra.Command{
		Use:   "list",
		Short: "List the " + k.what + "s",
		Long:  fmt.Sprintf("Lists the %ss: UUID and name, or with --long their steps and other fields too.", k.what),
		Args:  args(),
		RunE: func(*cobra.Command, []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			path := k.path("")
			cols := k.listCols
			if long {
				path += "?detail=True"
				cols = k.longCols
			}
			var resp map[string][]map[string]any
			if _, _, err := cl.do("GET", path, nil, &resp); err != nil {
				return err
			}
			rows := resp[k.collection]
			for _, r := range rows {
				delete(r, "links")
			}
			return c.table(rows, cols)
		},
	}, true)
	cc.Flags().BoolVar(&long, "long", false, "show every field, steps included")
	return cc
}

func (c *cmd) catalogShow(k catalogKind) *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:     "show " + k.arg,
		Short:   "Show a " + k.what,
		Long:    fmt.Sprintf("Shows a %s; %s is its name or UUID.", k.what, k.arg),
		Example: fmt.Sprintf("  coordinator %s show CUSTOM_BIOS_TUNED\n  coordinator %s show CUSTOM_BIOS_TUNED -f json", k.cmd, k.cmd),
		Args:    args(k.arg),
		RunE: func(_ *cobra.Command, a []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var v map[string]any
			if _, _, err := cl.do("GET", k.path(a[0]), nil, &v); err != nil {
				return err
			}
			delete(v, "links")
			return c.record(v)
		},
	}, true)
}

func (c *cmd) catalogDelete(k catalogKind) *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:   "delete " + k.arg + "...",
		Short: "Delete " + k.what + "s",
		Long:  fmt.Sprintf("Deletes %ss by name or UUID. Operations that started with one keep the steps they took from it.", k.what),
		Args: func(cc *cobra.Command, a []string) error {
			if len(a) == 0 {
				return usagef("%s takes one or more %s (names or UUIDs)", cc.CommandPath(), k.arg)
			}
			return nil
		},
		RunE: func(_ *cobra.Command, a []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			for _, id := range a {
				if _, _, err := cl.do("DELETE", k.path(id), nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(c.out, "%s %s deleted\n", k.what, id)
			}
			return nil
		},
	}, false)
}

// catalogPatch sends a JSON Patch of the named record and shows it.
func (c *cmd) catalogPatch(k catalogKind, id string, ops []map[string]any) error {
	if len(ops) == 0 {
		return usagef("%s set %s: nothing to change; give at least one of its flags (see --help)", k.cmd, id)
	}
	cl, err := c.apiClient()
	if err != nil {
		return err
	}
	var v map[string]any
	if _, _, err := cl.do("PATCH", k.path(id), ops, &v); err != nil {
		return err
	}
	delete(v, "links")
	return c.record(v)
}

var templateKind = catalogKind{cmd: "deploy-template", what: "deploy template", collection: "deploy_templates", arg: "TEMPLATE",
	listCols: []string{"uuid", "name"}, longCols: []string{"uuid", "name", "steps", "extra"},
	example: `[{"interface": "bios", "step": "apply_configuration", "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}, "priority": 150}]`}

func (c *cmd) templateCmd() *cobra.Command {
	k := templateKind
	var steps, id string
	extra := kv{}
	create := clientCmd(&cobra.Command{
		Use:   "create NAME --steps JSON|FILE|-",
		Short: "Create a deploy template",
		Long:  "Creates a deploy template named NAME (a trait name) with the steps of --steps: JSON text, a file, or - for standard input.",
		Example: "  coordinator deploy-template create CUSTOM_BIOS_TUNED --steps bios-tuned.json\n" +
			"  coordinator deploy-template create CUSTOM_BIOS_TUNED --steps '" + k.example + "'",
		Args: args("NAME"),
		RunE: func(_ *cobra.Command, a []string) error {
			if steps == "" {
				return usagef("deploy-template create needs --steps JSON|FILE|-, e.g. '%s'", k.example)
			}
			s, err := c.readJSONArg("steps", steps)
			if err != nil {
				return err
			}
			body := map[string]any{"name": a[0], "steps": s}
			if len(extra) > 0 {
				body["extra"] = extraValues(extra)
			}
			if id != "" {
				body["uuid"] = id
			}
			return c.postRecord(k.path(""), body)
		},
	}, true)
	fs := create.Flags()
	fs.StringVar(&steps, "steps", "", "the deploy steps: JSON text, a `FILE`, or - for standard input (required)")
	fs.Var(extra, "extra", "an extra field `K=V` kept with the template (repeatable)")
	fs.StringVar(&id, "uuid", "", "the template's `UUID` (default: a new one)")
	_ = create.MarkFlagFilename("steps", "json")

	var name, setSteps string
	setExtra := kv{}
	var removeExtra list
	set := clientCmd(&cobra.Command{
		Use:     "set TEMPLATE [--name NAME] [--steps JSON|FILE|-] [--extra K=V]... [--remove-extra K]...",
		Short:   "Change a deploy template",
		Long:    "Renames a deploy template, replaces its steps, or sets or removes its extra fields.",
		Example: "  coordinator deploy-template set CUSTOM_BIOS_TUNED --steps bios-tuned-v2.json\n  coordinator deploy-template set CUSTOM_BIOS_TUNED --extra owner=hpc",
		Args:    args("TEMPLATE"),
		RunE: func(_ *cobra.Command, a []string) error {
			ops, err := c.commonPatch(name, setSteps, setExtra, removeExtra)
			if err != nil {
				return err
			}
			return c.catalogPatch(k, a[0], ops)
		},
	}, true)
	fs = set.Flags()
	fs.StringVar(&name, "name", "", "new `NAME` (a trait name)")
	fs.StringVar(&setSteps, "steps", "", "replace the steps: JSON text, a `FILE`, or - for standard input")
	fs.Var(setExtra, "extra", "set an extra field `K=V` (repeatable)")
	fs.Var(&removeExtra, "remove-extra", "remove the extra field `K` (repeatable)")

	return c.groupCmd("deploy-template", "Create, list, change and delete deploy templates (steps a deploy's traits ask for)", templateLong,
		create, c.catalogList(k), c.catalogShow(k), set, c.catalogDelete(k))
}

// commonPatch is the JSON Patch of what deploy templates and runbooks
// share: name, steps, extra.
func (c *cmd) commonPatch(name, steps string, extra kv, unset list) ([]map[string]any, error) {
	var ops []map[string]any
	if name != "" {
		ops = append(ops, map[string]any{"op": "replace", "path": "/name", "value": name})
	}
	if steps != "" {
		s, err := c.readJSONArg("steps", steps)
		if err != nil {
			return nil, err
		}
		ops = append(ops, map[string]any{"op": "replace", "path": "/steps", "value": s})
	}
	for k, v := range extraValues(extra) {
		ops = append(ops, map[string]any{"op": "add", "path": "/extra/" + jsonPointer(k), "value": v})
	}
	for _, k := range unset {
		ops = append(ops, map[string]any{"op": "remove", "path": "/extra/" + jsonPointer(k)})
	}
	return ops, nil
}

// jsonPointer escapes one JSON Pointer token (RFC 6901).
func jsonPointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// postRecord creates a catalog record (a deploy template, a runbook) and
// prints what the API answered, without its links.
func (c *cmd) postRecord(path string, body map[string]any) error {
	cl, err := c.apiClient()
	if err != nil {
		return err
	}
	var v map[string]any
	if _, _, err := cl.do("POST", path, body, &v); err != nil {
		return err
	}
	delete(v, "links")
	return c.record(v)
}
