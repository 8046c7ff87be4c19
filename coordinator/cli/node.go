package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
	"github.com/spf13/cobra"
)

// verb is a provision verb: its command, the API's target and where it
// goes, read from the verb's row of the lifecycle's verb table
// (coordinator/fsm). The node command's help and docs/cli.md are made
// from them.
type verb struct {
	name, target, short string
	args                string // flags it needs, for the table
	from, to            string
	long                string
}

// verbs are the verb table's rows, in its order.
var verbs = func() []verb {
	var out []verb
	for _, r := range fsm.VerbSpecs() {
		out = append(out, verb{name: r.CLI, target: string(r.Verb), short: r.Short, args: r.CLIArgs, from: r.From(), to: r.To, long: r.Long})
	}
	return out
}()

// verbOf returns the CLI verb of an API target ("deleted" is undeploy).
func verbOf(target string) string {
	for _, v := range verbs {
		if v.target == target {
			return v.name
		}
	}
	return target
}

// verbTable is the verbs as a table, for the node command's help.
func verbTable() string {
	var b strings.Builder
	b.WriteString("| command | API target | from | to |\n|---|---|---|---|\n")
	for _, v := range verbs {
		fmt.Fprintf(&b, "| `node %s NODE%s` | %s | %s | %s |\n", v.name, strings.ReplaceAll(v.args, "|", `\|`), v.target, v.from, v.to)
	}
	return b.String()
}

const waitUsage = "follow the node until it rests, printing its state and step; exit 1 with last_error when it rests anywhere but the verb's target, 0 when it rests there or a hold step holds it; with SECONDS (--wait 600 or --wait=600) exit 2 after that long"

var nodeLong = `Nodes are enrolled with create, changed with set and unset, and moved through Ironic's
state machine by one verb each (docs/states.md has the whole machine):

` + verbTable() + `
` + "`--wait[=SECONDS]`" + ` follows the node, printing each state and the running step with its
progress (on a terminal, one live line with the time so far), and exits 0 when it rests
in the verb's target (or a hold step holds it: clean hold, deploy hold, service hold), 1
with last_error when it rests anywhere else (a failed state, or back where it came from),
2 when SECONDS pass; the operation carries on at the
coordinator after a timeout or Ctrl-C, and ` + "`node wait NODE`" + ` follows it again.

Values of K=V flags that look like integers, booleans or JSON become those types.`

// driverNames are the drivers this program ships, for help and
// completion.
func driverNames() []string {
	var out []string
	for _, d := range drivers.Builtin() {
		out = append(out, d.Name)
	}
	return out
}

func (c *cmd) nodeCmd() *cobra.Command {
	g := c.groupCmd("node", "Enroll nodes, change them and move them through their lifecycle", nodeLong)
	g.AddGroup(&cobra.Group{ID: "records", Title: "Nodes:"}, &cobra.Group{ID: "verbs", Title: "Verbs (each takes --wait):"},
		&cobra.Group{ID: "more", Title: "Following and looking into a node:"})
	add := func(group string, cs ...*cobra.Command) {
		for _, sub := range cs {
			sub.GroupID = group
			g.AddCommand(sub)
		}
	}
	add("records", c.nodeCreate(), c.nodeList(), c.nodeShow(), c.nodeSet(false), c.nodeSet(true), c.nodeDelete(), c.nodeTraitCmd())
	for _, v := range verbs {
		add("verbs", c.verbCmd(v))
	}
	add("more", c.nodeWait(), c.nodePower(), c.nodeSteps(), c.nodeHistory(), c.nodeInventory(), c.nodeFirmware(), c.nodeBIOS(), c.nodeSensors(), c.nodeEvents(),
		c.nodeConsole(), c.nodeConsoleSet(true), c.nodeConsoleSet(false))
	g.Example = "  coordinator node create --name n1 --driver fake --site site1 --port 52:54:00:12:34:01\n  coordinator node manage n1 --wait\n  coordinator node inspect n1 --wait\n  coordinator node provide n1 --wait"
	return g
}

// completeNode completes the first argument with the coordinator's node
// names.
func (c *cmd) completeNode(cc *cobra.Command, a []string, _ string) ([]string, cobra.ShellCompDirective) {
	if len(a) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return c.nodeNames(cc), cobra.ShellCompDirectiveNoFileComp
}

func (c *cmd) nodeNames(cc *cobra.Command) []string {
	c.applyEnv(cc)
	cl, err := c.apiClient()
	if err != nil {
		return nil
	}
	cl.http.Timeout = 5 * time.Second
	var resp struct {
		Nodes []struct {
			UUID string `json:"uuid"`
			Name string `json:"name"`
		} `json:"nodes"`
	}
	if _, _, err := cl.do("GET", "/v1/nodes", nil, &resp); err != nil {
		return nil
	}
	var out []string
	for _, n := range resp.Nodes {
		if n.Name != "" {
			out = append(out, n.Name)
		} else {
			out = append(out, n.UUID)
		}
	}
	return out
}

// nodeArg is a command on one NODE.
func (c *cmd) nodeArg(use, short string, run func(cl *client, id string) error) *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:               use,
		Short:             short,
		Args:              args("NODE"),
		ValidArgsFunction: c.completeNode,
		RunE: func(_ *cobra.Command, a []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			return run(cl, a[0])
		},
	}, false)
}

func nodePath(id string, rest ...string) string {
	return "/v1/nodes/" + url.PathEscape(id) + strings.Join(rest, "")
}

func (c *cmd) nodeCreate() *cobra.Command {
	var name, driver, site, raidIface, inspectIface, consoleIface string
	info, props, extra := kv{}, kv{}, kv{}
	var ports list
	cc := clientCmd(&cobra.Command{
		Use:   "create --driver DRIVER",
		Short: "Enroll a node",
		Long: `Enrolls a node (provision state enroll) with its BMC's access in driver_info and its
NICs as ports; 'node manage NODE' then verifies the BMC.`,
		Example: "  coordinator node create --name n1 --driver fake --site site1 --port 52:54:00:12:34:01\n" +
			"  coordinator node create --name r640-7 --driver ipmi --site site1 --driver-info ipmi_address=10.0.0.7 \\\n" +
			"      --driver-info ipmi_username=admin --driver-info ipmi_password=secret\n" +
			"  coordinator node create --name rf1 --driver redfish --site site1 --raid-interface redfish \\\n" +
			"      --driver-info redfish_address=https://10.0.0.8 --driver-info redfish_username=root --driver-info redfish_password=calvin",
		Args: func(_ *cobra.Command, a []string) error {
			if len(a) > 0 {
				return usagef("unexpected argument %q; the name is given with --name", a[0])
			}
			return nil
		},
		RunE: func(*cobra.Command, []string) error {
			if driver == "" {
				return usagef("node create needs --driver (%s)", strings.Join(driverNames(), ", "))
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			body := map[string]any{"driver": driver, "driver_info": typed(info), "properties": typed(props), "extra": typed(extra)}
			if name != "" {
				body["name"] = name
			}
			if site != "" {
				body["conductor_group"] = site
			}
			if raidIface != "" {
				body["raid_interface"] = raidIface
			}
			if consoleIface != "" {
				body["console_interface"] = consoleIface
			}
			if inspectIface != "" {
				body["inspect_interface"] = inspectIface
			}
			var n map[string]any
			if _, _, err := cl.do("POST", "/v1/nodes", body, &n); err != nil {
				return err
			}
			for _, mac := range ports {
				if _, _, err := cl.do("POST", "/v1/ports", map[string]any{"address": mac, "node_uuid": n["uuid"]}, nil); err != nil {
					return fmt.Errorf("node %v created, but port %s was not: %v", n["uuid"], mac, err)
				}
			}
			return c.record(n)
		},
	}, true)
	fs := cc.Flags()
	fs.SortFlags = false
	fs.StringVar(&driver, "driver", "", "the node's `DRIVER`: "+strings.Join(driverNames(), ", ")+" (required)")
	fs.StringVar(&name, "name", "", "the node's `NAME` (unique)")
	fs.StringVar(&site, "site", "", "the `SITE` whose edge agent drives the node (default: the only site)")
	fs.Var(info, "driver-info", "BMC access, e.g. ipmi_address=10.0.0.5 (repeatable)")
	fs.Var(props, "property", "node property (repeatable)")
	fs.Var(extra, "extra", "free-form extra field (repeatable)")
	fs.Var(&ports, "port", "`MAC` address of a NIC (repeatable)")
	fs.StringVar(&raidIface, "raid-interface", "", raidInterfaceUsage())
	_ = cc.RegisterFlagCompletionFunc("raid-interface", fixed(allRAIDInterfaces()...))
	fs.StringVar(&consoleIface, "console-interface", "", consoleInterfaceUsage)
	fs.StringVar(&inspectIface, "inspect-interface", "", inspectInterfaceUsage())
	_ = cc.RegisterFlagCompletionFunc("inspect-interface", fixed("agent", "redfish"))
	_ = cc.RegisterFlagCompletionFunc("driver", fixed(driverNames()...))
	_ = cc.RegisterFlagCompletionFunc("site", c.completeSite)
	for _, f := range []string{"name", "driver-info", "property", "extra", "port"} {
		_ = cc.RegisterFlagCompletionFunc(f, cobra.NoFileCompletions)
	}
	return cc
}

func (c *cmd) completeSite(cc *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
	c.applyEnv(cc)
	cl, err := c.apiClient()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cl.http.Timeout = 5 * time.Second
	var resp struct {
		Sites []struct {
			Name string `json:"name"`
		} `json:"sites"`
	}
	if _, _, err := cl.do("GET", "/v1/sites", nil, &resp); err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []string
	for _, s := range resp.Sites {
		out = append(out, s.Name)
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// typed turns K=V strings into JSON values where they look like numbers
// or booleans, as Ironic's client does for properties.
func typed(m kv) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = typedValue(v)
	}
	return out
}

func typedValue(v string) any {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n
	}
	if v == "true" || v == "false" {
		return v == "true"
	}
	var j any
	if (strings.HasPrefix(v, "{") || strings.HasPrefix(v, "[")) && json.Unmarshal([]byte(v), &j) == nil {
		return j
	}
	return v
}

func (c *cmd) nodeList() *cobra.Command {
	var state, site string
	var maint, retired, long bool
	var limit int
	cc := clientCmd(&cobra.Command{
		Use:   "list",
		Short: "List nodes, their site, power and provision state",
		Example: "  coordinator node list --provision-state available --site site1\n" +
			"  coordinator node list -c name -c provision_state -c last_error\n  coordinator node list -f json",
		Args: args(),
		RunE: func(*cobra.Command, []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			q := url.Values{}
			if state != "" {
				q.Set("provision_state", state)
			}
			if maint {
				q.Set("maintenance", "True")
			}
			if retired {
				q.Set("retired", "True")
			}
			if site != "" {
				q.Set("conductor_group", site)
			}
			if limit > 0 {
				q.Set("limit", strconv.Itoa(limit))
			}
			var resp struct {
				Nodes []map[string]any `json:"nodes"`
			}
			if _, _, err := cl.do("GET", "/v1/nodes/detail?"+q.Encode(), nil, &resp); err != nil {
				return err
			}
			cols := []string{"uuid", "name", "site", "power_state", "provision_state", "maintenance", "retired"}
			if long {
				cols = append(cols, "target_provision_state", "driver", "last_error")
			}
			for _, n := range resp.Nodes {
				n["site"] = n["conductor_group"]
			}
			return c.table(resp.Nodes, cols)
		},
	}, true)
	fs := cc.Flags()
	fs.StringVar(&state, "provision-state", "", "only nodes in this `STATE`")
	fs.BoolVar(&maint, "maintenance", false, "only nodes in maintenance")
	fs.BoolVar(&retired, "retired", false, "only retired nodes")
	fs.StringVar(&site, "site", "", "only nodes of this `SITE`")
	fs.IntVar(&limit, "limit", 0, "at most `N` nodes")
	fs.BoolVar(&long, "long", false, "more columns: target_provision_state, driver, last_error")
	_ = cc.RegisterFlagCompletionFunc("site", c.completeSite)
	_ = cc.RegisterFlagCompletionFunc("provision-state", cobra.NoFileCompletions)
	_ = cc.RegisterFlagCompletionFunc("limit", cobra.NoFileCompletions)
	return cc
}

func (c *cmd) getNode(cl *client, id string) (map[string]any, error) {
	var n map[string]any
	_, _, err := cl.do("GET", nodePath(id), nil, &n)
	return n, err
}

func (c *cmd) nodeShow() *cobra.Command {
	cc := c.nodeArg("show NODE", "Show a node's fields", func(cl *client, id string) error {
		n, err := c.getNode(cl, id)
		if err != nil {
			return err
		}
		n["site"] = n["conductor_group"]
		return c.record(n)
	})
	cc.Example = "  coordinator node show n1\n  coordinator node show n1 -c provision_state -c last_error\n  coordinator node show n1 -f json"
	return annotate(cc, usesOutput)
}

func (c *cmd) nodeDelete() *cobra.Command {
	cc := c.nodeArg("delete NODE", "Delete a node with its ports, inventory and history", func(cl *client, id string) error {
		if _, _, err := cl.do("DELETE", nodePath(id), nil, nil); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "node %s deleted\n", id)
		return nil
	})
	cc.Long = "Deletes a node that rests in enroll, manageable, available, inspect failed or clean failed,\nor any node in maintenance, with its ports, inventory and history."
	return cc
}

func (c *cmd) nodeSet(unset bool) *cobra.Command {
	verbName, short := "set", "Change a node's name, fields, retirement or maintenance"
	if unset {
		verbName, short = "unset", "Remove a node's fields, bring it back from retirement or out of maintenance"
	}
	var retired, maint, resetRAID, resetInspect bool
	var name, retiredReason, reason, site, raidIface, inspectIface, consoleIface string
	info, props, inst, extra := kv{}, kv{}, kv{}, kv{}
	var infoK, propK, instK, extraK list
	cc := clientCmd(&cobra.Command{
		Use:               verbName + " NODE",
		Short:             short,
		Args:              args("NODE"),
		ValidArgsFunction: c.completeNode,
		RunE: func(_ *cobra.Command, a []string) error {
			id := a[0]
			var ops []map[string]any
			add := func(op, path string, v any) {
				o := map[string]any{"op": op, "path": path}
				if op != "remove" {
					o["value"] = v
				}
				ops = append(ops, o)
			}
			if !unset {
				if name != "" {
					add("replace", "/name", name)
				}
				if site != "" {
					add("replace", "/conductor_group", site)
				}
				if retired {
					add("replace", "/retired", true)
				}
				if retiredReason != "" {
					add("replace", "/retired_reason", retiredReason)
				}
				if raidIface != "" {
					add("replace", "/raid_interface", raidIface)
				}
				if consoleIface != "" {
					add("replace", "/console_interface", consoleIface)
				}
				if inspectIface != "" {
					add("replace", "/inspect_interface", inspectIface)
				}
				for p, m := range map[string]kv{"driver_info": info, "properties": props, "instance_info": inst, "extra": extra} {
					for k, v := range m {
						add("add", "/"+p+"/"+k, typedValue(v))
					}
				}
			} else {
				if retired {
					add("replace", "/retired", false)
				}
				if resetRAID {
					add("remove", "/raid_interface", nil)
				}
				if resetInspect {
					add("remove", "/inspect_interface", nil)
				}
				for p, l := range map[string]list{"driver_info": infoK, "properties": propK, "instance_info": instK, "extra": extraK} {
					for _, k := range l {
						add("remove", "/"+p+"/"+k, nil)
					}
				}
			}
			if len(ops) == 0 && !maint {
				return usagef("nothing to %s; give at least one flag", verbName)
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			if len(ops) > 0 {
				if _, _, err := cl.do("PATCH", nodePath(id), ops, nil); err != nil {
					return err
				}
			}
			if maint {
				var err error
				if unset {
					_, _, err = cl.do("DELETE", nodePath(id, "/maintenance"), nil, nil)
				} else {
					_, _, err = cl.do("PUT", nodePath(id, "/maintenance"), map[string]string{"reason": reason}, nil)
				}
				if err != nil {
					return err
				}
			}
			fmt.Fprintf(c.out, "node %s updated\n", id)
			return nil
		},
	}, false)
	fs := cc.Flags()
	fs.SortFlags = false
	if !unset {
		cc.Long = "Changes the node with a JSON patch; with --maintenance it pauses the node, mid-operation too,\nuntil 'node unset NODE --maintenance'. Values that look like integers, booleans or JSON\nbecome those types."
		cc.Example = "  coordinator node set n1 --instance-info image_source=http://images.example/ubuntu-24.04.raw \\\n" +
			"      --instance-info image_checksum=sha256:6f1ed002ab5595859014ebf0951522d92f5b8e0d3c7a19e46b0d2c8f1a3e5b7d\n" +
			"  coordinator node set n3 --retired --retired-reason \"warranty ended\"\n" +
			"  coordinator node set n2 --maintenance --reason \"checking cables\"\n" +
			"  coordinator node set rf1 --raid-interface redfish    # the BMC's hardware RAID\n" +
			"  coordinator node set rf1 --inspect-interface redfish # inspect from the BMC, no ramdisk boot"
		fs.StringVar(&name, "name", "", "new `NAME`")
		fs.StringVar(&site, "site", "", "move the node to another registered `SITE` (its conductor_group)")
		fs.Var(info, "driver-info", "driver_info field (repeatable)")
		fs.Var(props, "property", "properties field (repeatable)")
		fs.Var(inst, "instance-info", "instance_info field, e.g. image_source=URL, image_checksum=sha256:HEX (repeatable)")
		fs.Var(extra, "extra", "extra field (repeatable)")
		fs.BoolVar(&retired, "retired", false, "retire the node: undeploy then ends in manageable, and provide is refused")
		fs.StringVar(&retiredReason, "retired-reason", "", "why the node is retired (`TEXT`)")
		fs.BoolVar(&maint, "maintenance", false, "put the node in maintenance: it pauses, mid-operation too")
		fs.StringVar(&reason, "reason", "", "why the node is in maintenance (`TEXT`)")
		fs.StringVar(&raidIface, "raid-interface", "", raidInterfaceUsage()+"; changes in enroll, manageable, available or maintenance")
		_ = cc.RegisterFlagCompletionFunc("raid-interface", fixed(allRAIDInterfaces()...))
		fs.StringVar(&consoleIface, "console-interface", "", consoleInterfaceUsage+"; changes in enroll, manageable, available or maintenance, while the console is disabled")
		fs.StringVar(&inspectIface, "inspect-interface", "", inspectInterfaceUsage()+"; changes in enroll, manageable, available or maintenance")
		_ = cc.RegisterFlagCompletionFunc("inspect-interface", fixed("agent", "redfish"))
	} else {
		cc.Example = "  coordinator node unset n1 --instance-info image_checksum\n  coordinator node unset n2 --maintenance\n" +
			"  coordinator node unset rf1 --raid-interface"
		fs.Var(&infoK, "driver-info", "driver_info `KEY` to remove (repeatable)")
		fs.Var(&propK, "property", "properties `KEY` to remove (repeatable)")
		fs.Var(&instK, "instance-info", "instance_info `KEY` to remove (repeatable)")
		fs.Var(&extraK, "extra", "extra `KEY` to remove (repeatable)")
		fs.BoolVar(&retired, "retired", false, "bring the node back from retirement")
		fs.BoolVar(&maint, "maintenance", false, "take the node out of maintenance: a paused operation resumes")
		fs.BoolVar(&resetRAID, "raid-interface", false, "reset the node's raid_interface to the default, agent (software RAID the ramdisk builds)")
		fs.BoolVar(&resetInspect, "inspect-interface", false, "reset the node's inspect_interface to the default, agent (the ramdisk inspects)")
	}
	return cc
}

// apiVerbs are the API's targets in its messages, with the CLI's verb.
var apiVerbs = regexp.MustCompile(`^The requested action "([^"]+)" can not be performed on node "([^"]*)" while it is in state "([^"]*)"\. Allowed there: (.*)\.$`)

// verbError says an API refusal of a verb in the CLI's words: undeploy,
// not "deleted".
func verbError(err error, v verb) error {
	ae, ok := err.(*apiError)
	if !ok {
		return err
	}
	if m := apiVerbs.FindStringSubmatch(ae.Msg); m != nil {
		allowed := strings.Split(m[4], ", ")
		for i, a := range allowed {
			allowed[i] = verbOf(a)
		}
		return fmt.Errorf("cannot %s node %s: it is in state %q, where only these verbs are allowed: %s (HTTP %d)",
			v.name, m[2], m[3], strings.Join(allowed, ", "), ae.Status)
	}
	if v.target != v.name {
		ae.Msg = strings.ReplaceAll(ae.Msg, "Cannot "+v.target+" node", "Cannot "+v.name+" node")
	}
	return ae
}

func (c *cmd) verbCmd(v verb) *cobra.Command {
	var w waitFlag
	var steps, rescuePW, runbook, configDrive string
	long := fmt.Sprintf("From: %s.\nTo: %s.\nAPI target: %s.", v.from, v.to, v.target)
	if v.long != "" {
		long += "\n\n" + v.long
	}
	cc := clientCmd(&cobra.Command{
		Use:               v.name + " NODE" + v.args,
		Short:             v.short,
		Long:              long,
		Example:           fmt.Sprintf("  coordinator node %s n1%s --wait", v.name, strings.ReplaceAll(strings.ReplaceAll(v.args, "FILE|-", "steps.json"), "PW", "choose-one")),
		Args:              args("NODE"),
		ValidArgsFunction: c.completeNode,
		RunE: func(_ *cobra.Command, a []string) error {
			id := a[0]
			body := map[string]any{"target": v.target}
			switch v.name {
			case "clean", "service":
				if runbook != "" {
					if steps != "" {
						return usagef("node %s takes either --%s-steps or --runbook, not both", v.name, v.name)
					}
					body["runbook"] = runbook
					break
				}
				if steps == "" {
					example := `[{"interface": "deploy", "step": "erase_devices_metadata"}]`
					if v.name == "service" {
						example = `[{"interface": "bios", "step": "apply_configuration", "args": {"settings": [{"name": "ProcTurboMode", "value": "Disabled"}]}}]`
					}
					return usagef("node %s needs --%s-steps FILE|-, e.g. %s", v.name, v.name, example)
				}
				var b []byte
				var err error
				if steps == "-" {
					b, err = io.ReadAll(c.stdin)
				} else {
					b, err = os.ReadFile(steps)
				}
				if err != nil {
					return fmt.Errorf("cannot read %s steps: %v", v.name, err)
				}
				var s any
				if err := json.Unmarshal(b, &s); err != nil {
					return fmt.Errorf("%s steps in %s are not valid JSON: %v", v.name, steps, err)
				}
				body[v.name+"_steps"] = s
			case "deploy", "rebuild":
				if configDrive != "" {
					cd, err := configDriveValue(configDrive)
					if err != nil {
						return err
					}
					body["configdrive"] = cd
				}
			case "rescue":
				if rescuePW == "" {
					return usagef("node rescue needs --rescue-password PW, the rescue user's password")
				}
				body["rescue_password"] = rescuePW
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			if _, _, err := cl.do("PUT", nodePath(id, "/states/provision"), body, nil); err != nil {
				return verbError(err, v)
			}
			if !w.on {
				fmt.Fprintf(c.out, "node %s: %s accepted\n", id, v.name)
				return nil
			}
			return c.follow(cl, id, v.name, time.Duration(w.secs)*time.Second)
		},
	}, false)
	fs := cc.Flags()
	switch v.name {
	case "clean":
		fs.StringVar(&steps, "clean-steps", "", "JSON list of clean steps, from a `FILE` or - for standard input (required unless --runbook)")
		_ = cc.MarkFlagFilename("clean-steps", "json")
	case "service":
		fs.StringVar(&steps, "service-steps", "", "JSON list of service steps, from a `FILE` or - for standard input (required unless --runbook)")
		_ = cc.MarkFlagFilename("service-steps", "json")
	}
	if v.name == "clean" || v.name == "service" {
		fs.StringVar(&runbook, "runbook", "", "run the steps of this `RUNBOOK` (name or UUID; the node needs a trait of its name) instead of --"+v.name+"-steps")
	}
	switch v.name {
	case "deploy", "rebuild":
		fs.StringVar(&configDrive, "config-drive", "", configDriveUsage)
	case "rescue":
		fs.StringVar(&rescuePW, "rescue-password", "", "password of the rescue user (`PW`, required)")
		_ = cc.RegisterFlagCompletionFunc("rescue-password", cobra.NoFileCompletions)
	}
	addWait(fs, &w, waitUsage)
	return cc
}

func (c *cmd) nodeWait() *cobra.Command {
	var w waitFlag
	cc := c.nodeArg("wait NODE", "Follow a node until it rests, without starting anything", nil)
	cc.Long = "Follows the node as --wait does, without starting anything: exits 0 when it rests where\nits operation was going (or already rests in a state that is not a failure), 1 with\nlast_error when it rests anywhere else, 2 after --wait SECONDS."
	cc.Example = "  coordinator node wait n2\n  coordinator node wait n2 --wait 600"
	cc.RunE = func(_ *cobra.Command, a []string) error {
		cl, err := c.apiClient()
		if err != nil {
			return err
		}
		return c.follow(cl, a[0], "wait", time.Duration(w.secs)*time.Second)
	}
	addWait(cc.Flags(), &w, "give up after SECONDS (exit 2); the default is no limit")
	return cc
}

func (c *cmd) nodePower() *cobra.Command {
	var w waitFlag
	targets := []string{"on", "off", "reboot", "soft-off", "soft-reboot"}
	api := map[string]string{"on": "power on", "off": "power off", "reboot": "rebooting", "soft-off": "soft power off", "soft-reboot": "soft rebooting"}
	cc := clientCmd(&cobra.Command{
		Use:   "power NODE on|off|reboot|soft-off|soft-reboot",
		Short: "Power a resting node on or off, or reboot it",
		Long: `Asks the site's edge agent to power the node through its BMC (Ironic's PUT states/power:
power on, power off, rebooting, soft power off, soft rebooting); refused (409) while the node
is under an operation. soft-off and soft-reboot ask the operating system to shut down first
(IPMI soft-off, Redfish GracefulShutdown) and force the power off if it has not in time.

Without --wait the command returns once the coordinator took the request; the power state
changes when the BMC has answered ('node show NODE -c power_state'). With --wait it follows
the node until the BMC has answered: exit 0 when the node is in the power state asked for
(power on after a reboot), 1 with last_error when the change failed, 2 after SECONDS.`,
		Args: args("NODE", "on|off|reboot|soft-off|soft-reboot"),
		ValidArgsFunction: func(cc *cobra.Command, a []string, s string) ([]string, cobra.ShellCompDirective) {
			if len(a) == 1 {
				return targets, cobra.ShellCompDirectiveNoFileComp
			}
			return c.completeNode(cc, a, s)
		},
		RunE: func(_ *cobra.Command, a []string) error {
			target := api[a[1]]
			if target == "" {
				return usagef("power %q is not known; use on, off, reboot, soft-off or soft-reboot", a[1])
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			if _, _, err := cl.do("PUT", nodePath(a[0], "/states/power"), map[string]string{"target": target}, nil); err != nil {
				return err
			}
			if !w.on {
				fmt.Fprintf(c.out, "node %s: power %s requested\n", a[0], a[1])
				return nil
			}
			want := "power on"
			if a[1] == "off" || a[1] == "soft-off" {
				want = "power off"
			}
			return c.followPower(cl, a[0], a[1], want, time.Duration(w.secs)*time.Second)
		},
	}, false)
	cc.Example = "  coordinator node power n1 reboot --wait\n  coordinator node power n1 soft-off --wait 300"
	addWait(cc.Flags(), &w, "follow the node until the BMC has answered; exit 0 in the power state asked for, 1 with last_error when the change failed; with SECONDS (--wait 300 or --wait=300) exit 2 after that long")
	return cc
}

func (c *cmd) nodeSteps() *cobra.Command {
	var min int
	cc := c.nodeArg("steps NODE", "List a node's clean steps, sorted as they run", func(cl *client, id string) error {
		var resp struct {
			Steps   []map[string]any `json:"steps"`
			Message string           `json:"message"`
		}
		code, hdr, err := cl.do("GET", fmt.Sprintf("%s?min_priority=%d", nodePath(id, "/cleaning/steps"), min), nil, &resp)
		if err != nil {
			return err
		}
		if code == 202 {
			fmt.Fprintln(c.err, retrySentence(resp.Message, hdr.Get("Retry-Request-After"), id))
		}
		return c.table(resp.Steps, []string{"interface", "step", "priority", "abortable", "requires_ramdisk"})
	})
	cc.Long = "Lists the clean steps of the node's driver and ramdisk, in the order they run. Until the\nnode's ramdisk has reported its steps (after inspect or a cleaning), only the driver's\nout-of-band steps are listed, and a note on standard error says when to ask again."
	cc.Example = "  coordinator node steps n1 --min-priority 1    # what automated cleaning runs"
	cc.Flags().IntVar(&min, "min-priority", 0, "only steps with at least this priority (`N`)")
	_ = cc.RegisterFlagCompletionFunc("min-priority", cobra.NoFileCompletions)
	return annotate(cc, usesOutput)
}

func (c *cmd) nodeHistory() *cobra.Command {
	cc := c.nodeArg("history NODE", "List a node's transitions and errors with their time", func(cl *client, id string) error {
		var resp struct {
			History []map[string]any `json:"history"`
		}
		if _, _, err := cl.do("GET", nodePath(id, "/history"), nil, &resp); err != nil {
			return err
		}
		return c.table(resp.History, []string{"created_at", "severity", "event_type", "event"})
	})
	return annotate(cc, usesOutput)
}

func (c *cmd) nodeInventory() *cobra.Command {
	cc := c.nodeArg("inventory NODE", "Print the last hardware inventory of a node (JSON, or YAML with -f yaml)", func(cl *client, id string) error {
		var v map[string]any
		if _, _, err := cl.do("GET", nodePath(id, "/inventory"), nil, &v); err != nil {
			return err
		}
		if len(c.columns) > 0 {
			keys, err := c.pick(nil, []map[string]any{v})
			if err != nil {
				return err
			}
			v = only(v, keys)
		}
		if c.format == "table" {
			f := c.format
			c.format = "json"
			defer func() { c.format = f }()
		}
		return c.structured(v)
	})
	return annotate(cc, usesOutput)
}
