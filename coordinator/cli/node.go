package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

var verbTargets = map[string]string{
	"manage": "manage", "inspect": "inspect", "provide": "provide", "deploy": "active", "rebuild": "rebuild",
	"rescue": "rescue", "unrescue": "unrescue", "undeploy": "deleted", "abort": "abort", "clean": "clean",
}

func (c *cmd) node(args []string) int {
	if len(args) == 0 {
		return c.fail("usage: coordinator node COMMAND ...; run 'coordinator help'")
	}
	sub, args := args[0], args[1:]
	cl, cerr := c.apiClient()
	if cerr != nil {
		return c.fail("%v", cerr)
	}
	if _, ok := verbTargets[sub]; ok {
		return c.verb(cl, sub, args)
	}
	switch sub {
	case "create":
		return c.nodeCreate(cl, args)
	case "list":
		return c.nodeList(cl, args)
	case "show":
		return c.nodeShow(cl, args)
	case "set":
		return c.nodeSet(cl, args, false)
	case "unset":
		return c.nodeSet(cl, args, true)
	case "delete":
		if len(args) != 1 {
			return c.fail("usage: coordinator node delete NODE")
		}
		if _, _, err := cl.do("DELETE", "/v1/nodes/"+url.PathEscape(args[0]), nil, nil); err != nil {
			return c.fail("%v", err)
		}
		fmt.Fprintf(c.out, "node %s deleted\n", args[0])
		return 0
	case "wait":
		rest, _, limit, err := waitArg(args)
		if err != nil {
			return c.fail("%v", err)
		}
		if len(rest) != 1 {
			return c.fail("usage: coordinator node wait NODE [--wait SECONDS]")
		}
		return c.follow(cl, rest[0], "wait", limit)
	case "steps":
		return c.nodeSteps(cl, args)
	case "history":
		return c.nodeHistory(cl, args)
	case "inventory":
		if len(args) != 1 {
			return c.fail("usage: coordinator node inventory NODE")
		}
		var v map[string]any
		if _, _, err := cl.do("GET", "/v1/nodes/"+url.PathEscape(args[0])+"/inventory", nil, &v); err != nil {
			return c.fail("%v", err)
		}
		b, _ := json.MarshalIndent(v, "", "  ")
		fmt.Fprintln(c.out, string(b))
		return 0
	case "power":
		if len(args) != 2 {
			return c.fail("usage: coordinator node power NODE on|off|reboot")
		}
		target := map[string]string{"on": "power on", "off": "power off", "reboot": "rebooted"}[args[1]]
		if target == "" {
			return c.fail("power target %q is not known; use on, off or reboot", args[1])
		}
		if _, _, err := cl.do("PUT", "/v1/nodes/"+url.PathEscape(args[0])+"/states/power", map[string]string{"target": target}, nil); err != nil {
			return c.fail("%v", err)
		}
		fmt.Fprintf(c.out, "node %s: %s requested\n", args[0], target)
		return 0
	}
	return c.fail("unknown node command %q; run 'coordinator help'", sub)
}

func (c *cmd) nodeCreate(cl *client, args []string) int {
	fs := c.flags("node create", "node create --name NAME --driver fake|ipmi|redfish --site SITE [--driver-info K=V]... [--property K=V]... [--port MAC]...")
	name := fs.String("name", "", "node name (unique)")
	driver := fs.String("driver", "", "fake, ipmi or redfish (required)")
	site := fs.String("site", "", "the site whose edge agent drives the node (default: the only site)")
	info, props, extra := kv{}, kv{}, kv{}
	var ports list
	fs.Var(info, "driver-info", "BMC access, e.g. ipmi_address=10.0.0.5 (repeatable)")
	fs.Var(props, "property", "node property K=V (repeatable)")
	fs.Var(extra, "extra", "free-form extra K=V (repeatable)")
	fs.Var(&ports, "port", "MAC address of a NIC (repeatable)")
	pos, err := parse(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) > 0 {
		return c.fail("unexpected argument %q; the name is given with --name", pos[0])
	}
	if *driver == "" {
		return c.fail("--driver is required (fake, ipmi or redfish)")
	}
	body := map[string]any{"driver": *driver, "driver_info": typed(info), "properties": typed(props), "extra": typed(extra)}
	if *name != "" {
		body["name"] = *name
	}
	if *site != "" {
		body["conductor_group"] = *site
	}
	var n map[string]any
	if _, _, err := cl.do("POST", "/v1/nodes", body, &n); err != nil {
		return c.fail("%v", err)
	}
	for _, mac := range ports {
		if _, _, err := cl.do("POST", "/v1/ports", map[string]any{"address": mac, "node_uuid": n["uuid"]}, nil); err != nil {
			return c.fail("node %v created, but port %s was not: %v", n["uuid"], mac, err)
		}
	}
	return c.record(n)
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

func (c *cmd) nodeList(cl *client, args []string) int {
	fs := c.flags("node list", "node list [--provision-state S] [--maintenance] [--retired] [--site SITE] [--limit N] [--long]")
	state := fs.String("provision-state", "", "only nodes in this state")
	maint := fs.Bool("maintenance", false, "only nodes in maintenance")
	retired := fs.Bool("retired", false, "only retired nodes")
	site := fs.String("site", "", "only nodes of this site")
	limit := fs.Int("limit", 0, "at most N nodes")
	long := fs.Bool("long", false, "more columns")
	if _, err := parse(fs, args); err != nil {
		return 2
	}
	q := url.Values{}
	if *state != "" {
		q.Set("provision_state", *state)
	}
	if *maint {
		q.Set("maintenance", "True")
	}
	if *retired {
		q.Set("retired", "True")
	}
	if *site != "" {
		q.Set("conductor_group", *site)
	}
	if *limit > 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	var resp struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if _, _, err := cl.do("GET", "/v1/nodes/detail?"+q.Encode(), nil, &resp); err != nil {
		return c.fail("%v", err)
	}
	cols := []string{"uuid", "name", "conductor_group", "power_state", "provision_state", "maintenance", "retired"}
	if *long {
		cols = append(cols, "target_provision_state", "driver", "last_error")
	}
	for _, n := range resp.Nodes {
		n["site"] = n["conductor_group"]
	}
	cols[2] = "site"
	return c.table(resp.Nodes, cols)
}

func (c *cmd) getNode(cl *client, id string) (map[string]any, error) {
	var n map[string]any
	_, _, err := cl.do("GET", "/v1/nodes/"+url.PathEscape(id), nil, &n)
	return n, err
}

func (c *cmd) nodeShow(cl *client, args []string) int {
	if len(args) != 1 {
		return c.fail("usage: coordinator node show NODE")
	}
	n, err := c.getNode(cl, args[0])
	if err != nil {
		return c.fail("%v", err)
	}
	n["site"] = n["conductor_group"]
	return c.record(n)
}

func (c *cmd) nodeSet(cl *client, args []string, unset bool) int {
	verb := "set"
	if unset {
		verb = "unset"
	}
	fs := c.flags("node "+verb, "node "+verb+" NODE [flags]")
	retired := fs.Bool("retired", false, "retire the node (set) or bring it back (unset)")
	maint := fs.Bool("maintenance", false, "pause the node (set) or resume it (unset)")
	var name, retiredReason, reason *string
	info, props, inst, extra := kv{}, kv{}, kv{}, kv{}
	var infoK, propK, instK, extraK list
	if !unset {
		name = fs.String("name", "", "new name")
		retiredReason = fs.String("retired-reason", "", "why the node is retired")
		reason = fs.String("reason", "", "why the node is in maintenance")
		fs.Var(info, "driver-info", "K=V (repeatable)")
		fs.Var(props, "property", "K=V (repeatable)")
		fs.Var(inst, "instance-info", "K=V, e.g. image_source=URL image_checksum=HEX (repeatable)")
		fs.Var(extra, "extra", "K=V (repeatable)")
	} else {
		fs.Var(&infoK, "driver-info", "key to remove (repeatable)")
		fs.Var(&propK, "property", "key to remove (repeatable)")
		fs.Var(&instK, "instance-info", "key to remove (repeatable)")
		fs.Var(&extraK, "extra", "key to remove (repeatable)")
	}
	pos, err := parse(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		return c.fail("usage: coordinator node %s NODE [flags]", verb)
	}
	id := url.PathEscape(pos[0])
	var ops []map[string]any
	add := func(op, path string, v any) {
		o := map[string]any{"op": op, "path": path}
		if op != "remove" {
			o["value"] = v
		}
		ops = append(ops, o)
	}
	if !unset {
		if *name != "" {
			add("replace", "/name", *name)
		}
		if *retired {
			add("replace", "/retired", true)
		}
		if *retiredReason != "" {
			add("replace", "/retired_reason", *retiredReason)
		}
		for p, m := range map[string]kv{"driver_info": info, "properties": props, "instance_info": inst, "extra": extra} {
			for k, v := range m {
				add("add", "/"+p+"/"+k, typedValue(v))
			}
		}
	} else {
		if *retired {
			add("replace", "/retired", false)
		}
		for p, l := range map[string]list{"driver_info": infoK, "properties": propK, "instance_info": instK, "extra": extraK} {
			for _, k := range l {
				add("remove", "/"+p+"/"+k, nil)
			}
		}
	}
	if len(ops) > 0 {
		if _, _, err := cl.do("PATCH", "/v1/nodes/"+id, ops, nil); err != nil {
			return c.fail("%v", err)
		}
	}
	if *maint {
		var err error
		if unset {
			_, _, err = cl.do("DELETE", "/v1/nodes/"+id+"/maintenance", nil, nil)
		} else {
			_, _, err = cl.do("PUT", "/v1/nodes/"+id+"/maintenance", map[string]string{"reason": *reason}, nil)
		}
		if err != nil {
			return c.fail("%v", err)
		}
	}
	if len(ops) == 0 && !*maint {
		return c.fail("nothing to %s; see 'coordinator node %s --help'", verb, verb)
	}
	fmt.Fprintf(c.out, "node %s updated\n", pos[0])
	return 0
}

func (c *cmd) nodeSteps(cl *client, args []string) int {
	fs := c.flags("node steps", "node steps NODE [--min-priority N]")
	min := fs.Int("min-priority", 0, "only steps with at least this priority")
	pos, err := parse(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		return c.fail("usage: coordinator node steps NODE [--min-priority N]")
	}
	var resp struct {
		Steps   []map[string]any `json:"steps"`
		Message string           `json:"message"`
	}
	code, hdr, err := cl.do("GET", fmt.Sprintf("/v1/nodes/%s/cleaning/steps?min_priority=%d", url.PathEscape(pos[0]), *min), nil, &resp)
	if err != nil {
		return c.fail("%v", err)
	}
	if code == 202 {
		fmt.Fprintf(c.err, "%s (Retry-Request-After: %s)\n", resp.Message, hdr.Get("Retry-Request-After"))
	}
	return c.table(resp.Steps, []string{"interface", "step", "priority", "abortable", "requires_ramdisk"})
}

func (c *cmd) nodeHistory(cl *client, args []string) int {
	if len(args) != 1 {
		return c.fail("usage: coordinator node history NODE")
	}
	var resp struct {
		History []map[string]any `json:"history"`
	}
	if _, _, err := cl.do("GET", "/v1/nodes/"+url.PathEscape(args[0])+"/history", nil, &resp); err != nil {
		return c.fail("%v", err)
	}
	return c.table(resp.History, []string{"created_at", "severity", "event_type", "event"})
}

// waitArg pulls "--wait [SECONDS]" out of args.
func waitArg(args []string) (rest []string, wait bool, limit time.Duration, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--wait" || a == "-wait" {
			wait = true
			if i+1 < len(args) {
				if s, err := strconv.Atoi(args[i+1]); err == nil {
					limit = time.Duration(s) * time.Second
					i++
				}
			}
			continue
		}
		if v, ok := strings.CutPrefix(a, "--wait="); ok {
			wait = true
			s, e := strconv.Atoi(v)
			if e != nil {
				return nil, false, 0, fmt.Errorf("--wait takes seconds, not %q", v)
			}
			limit = time.Duration(s) * time.Second
			continue
		}
		rest = append(rest, a)
	}
	return rest, wait, limit, nil
}

func (c *cmd) verb(cl *client, sub string, args []string) int {
	args, wait, limit, err := waitArg(args)
	if err != nil {
		return c.fail("%v", err)
	}
	fs := c.flags("node "+sub, "node "+sub+" NODE [--wait [SECONDS]]")
	var steps, rescuePW *string
	if sub == "clean" {
		steps = fs.String("clean-steps", "", "JSON list of clean steps, from a file or - for standard input (required)")
	}
	if sub == "rescue" {
		rescuePW = fs.String("rescue-password", "", "password of the rescue user (required)")
	}
	pos, err := parse(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != 1 {
		return c.fail("usage: coordinator node %s NODE [--wait [SECONDS]]", sub)
	}
	body := map[string]any{"target": verbTargets[sub]}
	if sub == "clean" {
		if *steps == "" {
			return c.fail("--clean-steps FILE|- is required, e.g. [{\"interface\": \"deploy\", \"step\": \"erase_devices_metadata\"}]")
		}
		var b []byte
		if *steps == "-" {
			b, err = io.ReadAll(c.stdin)
		} else {
			b, err = os.ReadFile(*steps)
		}
		if err != nil {
			return c.fail("cannot read clean steps: %v", err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return c.fail("clean steps in %s are not valid JSON: %v", *steps, err)
		}
		body["clean_steps"] = v
	}
	if sub == "rescue" {
		if *rescuePW == "" {
			return c.fail("--rescue-password is required to rescue a node")
		}
		body["rescue_password"] = *rescuePW
	}
	id := pos[0]
	if _, _, err := cl.do("PUT", "/v1/nodes/"+url.PathEscape(id)+"/states/provision", body, nil); err != nil {
		return c.fail("%v", err)
	}
	if !wait {
		fmt.Fprintf(c.out, "node %s: %s accepted\n", id, sub)
		return 0
	}
	return c.follow(cl, id, sub, limit)
}

func failed(state string) bool {
	return strings.HasSuffix(state, "failed") || state == "error"
}

// follow polls the node until it rests, printing every change.
func (c *cmd) follow(cl *client, id, sub string, limit time.Duration) int {
	start := time.Now()
	last, want := "", ""
	for {
		n, err := c.getNode(cl, id)
		if err != nil {
			return c.fail("%v", err)
		}
		state, _ := n["provision_state"].(string)
		target, _ := n["target_provision_state"].(string)
		if want == "" {
			want = target // where the verb is meant to end
		}
		line := state
		if target != "" {
			line += " → " + target
		}
		for _, k := range []string{"clean_step", "deploy_step"} {
			if s, ok := n[k].(map[string]any); ok && s["step"] != nil {
				line += fmt.Sprintf("  [%v.%v", s["interface"], s["step"])
				if p, ok := s["progress"].(float64); ok && p > 0 {
					line += fmt.Sprintf(" %d%%", int(p*100))
				}
				line += "]"
			}
		}
		if m, _ := n["maintenance"].(bool); m {
			line += "  (maintenance: paused)"
		}
		if on, ok := n["site_online"].(bool); ok && !on {
			line += "  (site offline: waiting for it)"
		}
		if line != last {
			fmt.Fprintf(c.out, "%6.1fs  %s: %s\n", time.Since(start).Seconds(), id, line)
			last = line
		}
		resv, _ := n["reservation"].(string)
		if target == "" && resv == "" {
			// A verb fails when the node lands in a failed state, or
			// anywhere but where the verb was going (manage's failed
			// verification goes back to enroll), as baremetal --wait.
			missed := want != "" && state != want && !(failed(want) && failed(state))
			if sub != "abort" && (failed(state) || missed || (sub == "manage" && state == "enroll")) {
				le, _ := n["last_error"].(string)
				if want != "" && state != want {
					fmt.Fprintf(c.err, "error: node %s is in %s, not %s: %s\n", id, state, want, le)
				} else {
					fmt.Fprintf(c.err, "error: node %s is in %s: %s\n", id, state, le)
				}
				return 1
			}
			return 0
		}
		if limit > 0 && time.Since(start) > limit {
			fmt.Fprintf(c.err, "error: node %s still in %s after %s; it goes on, follow it with 'node show %s'\n", id, state, limit, id)
			return 2
		}
		time.Sleep(300 * time.Millisecond)
	}
}

func (c *cmd) port(args []string) int {
	if len(args) == 0 {
		return c.fail("usage: coordinator port create MAC --node NODE | port list [--node NODE] | port delete PORT")
	}
	cl, cerr := c.apiClient()
	if cerr != nil {
		return c.fail("%v", cerr)
	}
	switch args[0] {
	case "create":
		fs := c.flags("port create", "port create MAC --node NODE")
		node := fs.String("node", "", "node name or UUID (required)")
		pos, err := parse(fs, args[1:])
		if err != nil {
			return 2
		}
		if len(pos) != 1 || *node == "" {
			return c.fail("usage: coordinator port create MAC --node NODE")
		}
		n, err := c.getNode(cl, *node)
		if err != nil {
			return c.fail("%v", err)
		}
		var p map[string]any
		if _, _, err := cl.do("POST", "/v1/ports", map[string]any{"address": pos[0], "node_uuid": n["uuid"]}, &p); err != nil {
			return c.fail("%v", err)
		}
		return c.record(p)
	case "list":
		fs := c.flags("port list", "port list [--node NODE]")
		node := fs.String("node", "", "only ports of this node")
		if _, err := parse(fs, args[1:]); err != nil {
			return 2
		}
		var resp struct {
			Ports []map[string]any `json:"ports"`
		}
		if _, _, err := cl.do("GET", "/v1/ports/detail?node="+url.QueryEscape(*node), nil, &resp); err != nil {
			return c.fail("%v", err)
		}
		return c.table(resp.Ports, []string{"uuid", "address", "node_uuid"})
	case "delete":
		if len(args) != 2 {
			return c.fail("usage: coordinator port delete PORT")
		}
		if _, _, err := cl.do("DELETE", "/v1/ports/"+url.PathEscape(args[1]), nil, nil); err != nil {
			return c.fail("%v", err)
		}
		fmt.Fprintf(c.out, "port %s deleted\n", args[1])
		return 0
	}
	return c.fail("unknown port command %q", args[0])
}
