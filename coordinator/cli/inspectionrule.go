package cli

import (
	"fmt"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"
)

const inspectionRuleLong = `An inspection rule (Ironic's, API 1.96) runs on every inspection, in band and
out of band, once the inventory is applied to the node: when all its conditions
hold, its actions change the node. Rules run by priority, highest first
(0 to 9999; the built-in rules of serve --inspection-rules may have any).

Conditions and actions are JSON lists in Ironic's format; a string argument may
name values with {inventory[memory][physical_mb]}, {node.properties[memory_mb]},
{node.driver_info[redfish_address]}, {plugin_data[...]} and, in a loop, {item}:

  --conditions '[{"op": "!lt", "args": {"values": ["{node.properties[memory_mb]}", 65536]}},
                 {"op": "eq", "args": {"values": ["{item[vendor]}", "0x15b3"]},
                  "loop": "{inventory[interfaces]}", "multiple": "any"}]'
  --actions '[{"op": "add-trait", "args": {"name": "CUSTOM_MELLANOX"}},
              {"op": "set-attribute", "args": {"path": "/properties/nic_vendor", "value": "mellanox"}}]'

Operators: eq, lt, gt, is-empty, in-net, matches, contains, one-of, is-none,
is-true, is-false, each inverted by a leading !. Actions: set-attribute,
extend-attribute, del-attribute (driver_info, properties, extra, instance_info
keys; driver, the interfaces, resource_class, description, owner), add-trait,
remove-trait, set-capability, unset-capability, set-plugin-data,
extend-plugin-data, unset-plugin-data, log, and fail (fails the inspection with
its message). A sensitive rule's conditions and actions are never shown again
(null), and a rule stays sensitive. docs/discovery.md has the details.`

const ruleExample = `[{"op": "add-trait", "args": {"name": "CUSTOM_BIG"}}]`

func rulePath(id string) string {
	p := "/v1/inspection_rules"
	if id != "" {
		p += "/" + url.PathEscape(id)
	}
	return p
}

func (c *cmd) inspectionRuleCmd() *cobra.Command {
	var conditions, actions, description, id, phase string
	var priority int
	var sensitive bool
	create := clientCmd(&cobra.Command{
		Use:   "create --actions JSON|FILE|- [--conditions JSON|FILE|-] [--priority N] [--description TEXT] [--sensitive] [--uuid UUID]",
		Short: "Create an inspection rule",
		Long: "Creates an inspection rule: its actions (required) and conditions are JSON text, a file, or - for standard input " +
			"(only one of them from standard input). A rule without conditions applies to every node inspected.",
		Example: "  coordinator inspection-rule create --priority 50 --description 'big nodes' \\\n" +
			"      --conditions '[{\"op\": \"gt\", \"args\": {\"values\": [\"{inventory[memory][physical_mb]}\", 65536]}}]' \\\n" +
			"      --actions '[{\"op\": \"add-trait\", \"args\": {\"name\": \"CUSTOM_BIG\"}}]'\n" +
			"  coordinator inspection-rule create --actions '[{\"op\": \"fail\", \"args\": {\"msg\": \"no BMC address\"}}]' \\\n" +
			"      --conditions '[{\"op\": \"is-empty\", \"args\": {\"value\": \"{inventory[bmc_address]}\"}}]'",
		Args: args(),
		RunE: func(cc *cobra.Command, _ []string) error {
			if actions == "" {
				return usagef("inspection-rule create needs --actions JSON|FILE|-, e.g. '%s'", ruleExample)
			}
			if actions == "-" && conditions == "-" {
				return usagef("only one of --actions and --conditions can be read from standard input (-)")
			}
			a, err := c.readJSONArg("actions", actions)
			if err != nil {
				return err
			}
			body := map[string]any{"actions": a}
			if conditions != "" {
				cnd, err := c.readJSONArg("conditions", conditions)
				if err != nil {
					return err
				}
				body["conditions"] = cnd
			}
			if cc.Flags().Changed("priority") {
				body["priority"] = priority
			}
			if description != "" {
				body["description"] = description
			}
			if phase != "" {
				body["phase"] = phase
			}
			if sensitive {
				body["sensitive"] = true
			}
			if id != "" {
				body["uuid"] = id
			}
			return c.postRecord(rulePath(""), body)
		},
	}, true)
	fs := create.Flags()
	fs.StringVar(&actions, "actions", "", "the actions: JSON text, a `FILE`, or - for standard input (required)")
	fs.StringVar(&conditions, "conditions", "", "the conditions, all of which must hold: JSON text, a `FILE`, or - (default: none, the rule always applies)")
	fs.IntVar(&priority, "priority", 0, "`N` from 0 to 9999: rules of higher priority run first")
	fs.StringVar(&description, "description", "", "a `TEXT` of at most 255 characters")
	fs.StringVar(&phase, "phase", "", "the inspection `PHASE` the rule runs in (main, the only one and the default)")
	fs.BoolVar(&sensitive, "sensitive", false, "hide the rule's conditions and actions from every later read (for rules that carry secrets); cannot be undone")
	fs.StringVar(&id, "uuid", "", "the rule's `UUID` (default: a new one)")
	_ = create.MarkFlagFilename("actions", "json")
	_ = create.MarkFlagFilename("conditions", "json")

	var long bool
	list := clientCmd(&cobra.Command{
		Use:   "list [--long]",
		Short: "List the inspection rules",
		Long: "Lists the inspection rules, stored and built-in ones, in the order they were made: UUID, priority, phase and description, " +
			"or with --long their conditions and actions too (null for a sensitive rule).",
		Args: args(),
		RunE: func(*cobra.Command, []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			path, cols := rulePath(""), []string{"uuid", "priority", "phase", "description"}
			if long {
				path += "?detail=True"
				cols = append(cols, "sensitive", "conditions", "actions")
			}
			var resp map[string][]map[string]any
			if _, _, err := cl.do("GET", path, nil, &resp); err != nil {
				return err
			}
			rows := resp["inspection_rules"]
			for _, r := range rows {
				delete(r, "links")
			}
			return c.table(rows, cols)
		},
	}, true)
	list.Flags().BoolVar(&long, "long", false, "show every field, conditions and actions included")

	show := clientCmd(&cobra.Command{
		Use:     "show RULE",
		Short:   "Show an inspection rule",
		Long:    "Shows an inspection rule; RULE is its UUID. A sensitive rule shows null conditions and actions.",
		Example: "  coordinator inspection-rule show 6f7e9a50-4b8c-4b1e-9d6e-2a4b8f1c0d3e -f json",
		Args:    args("RULE"),
		RunE: func(_ *cobra.Command, a []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var v map[string]any
			if _, _, err := cl.do("GET", rulePath(a[0]), nil, &v); err != nil {
				return err
			}
			delete(v, "links")
			return c.record(v)
		},
	}, true)

	var setConditions, setActions, setDescription, setPriority string
	var setSensitive bool
	set := clientCmd(&cobra.Command{
		Use:   "set RULE [--actions JSON|FILE|-] [--conditions JSON|FILE|-] [--priority N] [--description TEXT] [--sensitive]",
		Short: "Change an inspection rule",
		Long: "Replaces an inspection rule's actions or conditions, changes its priority or description (--description \"\" removes it), " +
			"or makes it sensitive (a sensitive rule cannot be made plain again). The rule is checked again as a whole.",
		Example: "  coordinator inspection-rule set 6f7e9a50-4b8c-4b1e-9d6e-2a4b8f1c0d3e --priority 90\n" +
			"  coordinator inspection-rule set 6f7e9a50-4b8c-4b1e-9d6e-2a4b8f1c0d3e --conditions conditions.json",
		Args: args("RULE"),
		RunE: func(cc *cobra.Command, a []string) error {
			var ops []map[string]any
			if setActions == "-" && setConditions == "-" {
				return usagef("only one of --actions and --conditions can be read from standard input (-)")
			}
			for _, f := range []struct{ flag, v string }{{"actions", setActions}, {"conditions", setConditions}} {
				if f.v == "" {
					continue
				}
				x, err := c.readJSONArg(f.flag, f.v)
				if err != nil {
					return err
				}
				ops = append(ops, map[string]any{"op": "replace", "path": "/" + f.flag, "value": x})
			}
			if cc.Flags().Changed("priority") {
				n, err := strconv.Atoi(setPriority)
				if err != nil {
					return usagef("--priority %q: give a whole number from 0 to 9999", setPriority)
				}
				ops = append(ops, map[string]any{"op": "replace", "path": "/priority", "value": n})
			}
			if cc.Flags().Changed("description") {
				if setDescription == "" {
					ops = append(ops, map[string]any{"op": "remove", "path": "/description"})
				} else {
					ops = append(ops, map[string]any{"op": "replace", "path": "/description", "value": setDescription})
				}
			}
			if cc.Flags().Changed("sensitive") {
				// false is refused for a sensitive rule (400), and changes
				// nothing on another.
				ops = append(ops, map[string]any{"op": "replace", "path": "/sensitive", "value": setSensitive})
			}
			if len(ops) == 0 {
				return usagef("inspection-rule set %s: nothing to change; give at least one of its flags (see --help)", a[0])
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var v map[string]any
			if _, _, err := cl.do("PATCH", rulePath(a[0]), ops, &v); err != nil {
				return err
			}
			delete(v, "links")
			return c.record(v)
		},
	}, true)
	fs = set.Flags()
	fs.StringVar(&setActions, "actions", "", "replace the actions: JSON text, a `FILE`, or - for standard input")
	fs.StringVar(&setConditions, "conditions", "", "replace the conditions: JSON text, a `FILE`, or - for standard input")
	fs.StringVar(&setPriority, "priority", "", "new priority `N` (0 to 9999)")
	fs.StringVar(&setDescription, "description", "", "new description `TEXT` (\"\" removes it)")
	fs.BoolVar(&setSensitive, "sensitive", false, "make the rule sensitive: its conditions and actions are never shown again")

	del := clientCmd(&cobra.Command{
		Use:   "delete RULE...",
		Short: "Delete inspection rules",
		Long:  "Deletes inspection rules by UUID. Built-in rules (serve --inspection-rules) cannot be deleted here: change the file.",
		Args: func(cc *cobra.Command, a []string) error {
			if len(a) == 0 {
				return usagef("%s takes one or more RULE (UUIDs)", cc.CommandPath())
			}
			return nil
		},
		RunE: func(_ *cobra.Command, a []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			for _, id := range a {
				if _, _, err := cl.do("DELETE", rulePath(id), nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(c.out, "inspection rule %s deleted\n", id)
			}
			return nil
		},
	}, false)

	return c.groupCmd("inspection-rule", "Create, list, change and delete inspection rules (conditions on the inventory, actions on the node)",
		inspectionRuleLong, create, list, show, set, del)
}
