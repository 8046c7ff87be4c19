package cli

import (
	"github.com/spf13/cobra"
)

const runbookLong = `A runbook is a named list of clean or service steps that operators approve
for nodes by trait: ` + "`node clean NODE --runbook NAME`" + ` or ` + "`node service NODE --runbook NAME`" + `
runs its steps, by order, on a node that has a trait of the runbook's name
(node trait add NODE NAME), and is refused (HTTP 400) on any other node.

NAME is a trait name: CUSTOM_ followed by capital letters, digits and
underscores (CUSTOM_FIRMWARE_2026), or a standard os-traits name. Each step has
interface, step, args and order, as Ironic's runbooks (API 1.92):

  [{"interface": "bios", "step": "apply_configuration",
    "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}, "order": 1}]

A runbook with --disable-ramdisk takes only steps that run out of band (the
ramdisk is never booted for it). --public and --owner are kept and shown as
Ironic's; every user of this coordinator administers it, and may use any
runbook.`

var runbookKind = catalogKind{cmd: "runbook", what: "runbook", collection: "runbooks", arg: "RUNBOOK",
	listCols: []string{"uuid", "name"}, longCols: []string{"uuid", "name", "steps", "public", "owner", "disable_ramdisk", "extra"},
	example: `[{"interface": "management", "step": "reset_bmc", "args": {}, "order": 1}]`}

func (c *cmd) runbookCmd() *cobra.Command {
	k := runbookKind
	var steps, id, owner string
	var public, noRamdisk bool
	extra := kv{}
	create := clientCmd(&cobra.Command{
		Use:   "create NAME --steps JSON|FILE|-",
		Short: "Create a runbook",
		Long:  "Creates a runbook named NAME (a trait name) with the steps of --steps: JSON text, a file, or - for standard input.",
		Example: "  coordinator runbook create CUSTOM_FIRMWARE_2026 --steps firmware.json\n" +
			"  coordinator runbook create CUSTOM_BMC_RESET --disable-ramdisk --steps '" + k.example + "'\n" +
			"  coordinator node trait add n1 CUSTOM_BMC_RESET\n  coordinator node clean n1 --runbook CUSTOM_BMC_RESET --wait",
		Args: args("NAME"),
		RunE: func(_ *cobra.Command, a []string) error {
			if steps == "" {
				return usagef("runbook create needs --steps JSON|FILE|-, e.g. '%s'", k.example)
			}
			s, err := c.readJSONArg("steps", steps)
			if err != nil {
				return err
			}
			body := map[string]any{"name": a[0], "steps": s, "public": public, "disable_ramdisk": noRamdisk}
			if len(extra) > 0 {
				body["extra"] = extraValues(extra)
			}
			if id != "" {
				body["uuid"] = id
			}
			if owner != "" {
				body["owner"] = owner
			}
			return c.postRecord(k.path(""), body)
		},
	}, true)
	fs := create.Flags()
	fs.StringVar(&steps, "steps", "", "the steps: JSON text, a `FILE`, or - for standard input (required)")
	fs.Var(extra, "extra", "an extra field `K=V` kept with the runbook (repeatable)")
	fs.StringVar(&id, "uuid", "", "the runbook's `UUID` (default: a new one)")
	fs.BoolVar(&public, "public", false, "mark the runbook public (kept and shown)")
	fs.StringVar(&owner, "owner", "", "the runbook's owner, a `PROJECT` (kept and shown; not with --public)")
	fs.BoolVar(&noRamdisk, "disable-ramdisk", false, "run the steps without booting the ramdisk: only out-of-band steps are accepted")
	_ = create.MarkFlagFilename("steps", "json")

	var name, setSteps, setOwner string
	var setPublic bool
	setExtra := kv{}
	var removeExtra list
	set := clientCmd(&cobra.Command{
		Use:   "set RUNBOOK [--name NAME] [--steps JSON|FILE|-] [--public=true|false] [--owner PROJECT] [--extra K=V]... [--remove-extra K]...",
		Short: "Change a runbook",
		Long: `Renames a runbook, replaces its steps, sets or removes its extra fields, makes it
public or not, or gives it an owner (a public runbook has none: --public=false --owner P
in one command). disable_ramdisk cannot be changed (as Ironic): create another runbook.`,
		Example: "  coordinator runbook set CUSTOM_FIRMWARE_2026 --steps firmware-v2.json\n  coordinator runbook set CUSTOM_FIRMWARE_2026 --public=false --owner proj1",
		Args:    args("RUNBOOK"),
		RunE: func(cc *cobra.Command, a []string) error {
			ops, err := c.commonPatch(name, setSteps, setExtra, removeExtra)
			if err != nil {
				return err
			}
			if cc.Flags().Changed("public") {
				ops = append(ops, map[string]any{"op": "replace", "path": "/public", "value": setPublic})
			}
			if cc.Flags().Changed("owner") {
				if setOwner == "" {
					ops = append(ops, map[string]any{"op": "replace", "path": "/owner", "value": nil})
				} else {
					ops = append(ops, map[string]any{"op": "replace", "path": "/owner", "value": setOwner})
				}
			}
			return c.catalogPatch(k, a[0], ops)
		},
	}, true)
	fs = set.Flags()
	fs.StringVar(&name, "name", "", "new `NAME` (a trait name)")
	fs.StringVar(&setSteps, "steps", "", "replace the steps: JSON text, a `FILE`, or - for standard input")
	fs.BoolVar(&setPublic, "public", false, "make the runbook public (true) or not (false); clears its owner")
	fs.StringVar(&setOwner, "owner", "", "set the owner `PROJECT` (\"\" removes it)")
	fs.Var(setExtra, "extra", "set an extra field `K=V` (repeatable)")
	fs.Var(&removeExtra, "remove-extra", "remove the extra field `K` (repeatable)")

	return c.groupCmd("runbook", "Create, list, change and delete runbooks (steps approved for nodes by trait)", runbookLong,
		create, c.catalogList(k), c.catalogShow(k), set, c.catalogDelete(k))
}
