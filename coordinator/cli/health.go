package cli

import (
	"net/url"
	"strconv"

	"github.com/spf13/cobra"
)

// node sensors and node events read the hardware's health as the site's
// edge agent read it from the node's BMC (this API's own
// /v1/nodes/{node}/sensors and /events; the node's health field is
// Ironic's, API 1.109, shown by node show).

const sensorsLong = `Lists the node's sensors as its BMC last reported them, read at the site by the edge
agent with power sync: temperatures, fans, power supplies and voltages (Redfish
Thermal and Power, or the Sensors collection; IPMI's SDR), each with its reading,
units, status (OK, Warning past a non-critical threshold, Critical past a critical
one) and thresholds. The readings are sent when a status changes, and otherwise at
the agent's --sensor-interval (10 min by default); read_at in -f json's answer of
the API says when. A driver without health readings (fake, simulated nodes) has
none, and the list is empty. The node's overall health is node show's health.`

const eventsLong = `Lists the entries of the node's BMC event log (IPMI SEL, Redfish LogServices) that the
coordinator keeps, oldest first, each numbered by seq in the order received. The
edge agent reads the log with power sync and sends the entries new since its last
reading (at most 200 a reading, the newest), also after a WAN outage; the
coordinator keeps the newest 500 of each node, messages cut to 512 bytes.
--since SEQ lists those after SEQ (the last seq you read), to follow the log.`

func (c *cmd) nodeSensors() *cobra.Command {
	cc := c.nodeArg("sensors NODE", "List a node's sensors (temperatures, fans, power supplies, voltages) and their status", func(cl *client, id string) error {
		var resp struct {
			Sensors []map[string]any `json:"sensors"`
		}
		if _, _, err := cl.do("GET", nodePath(id, "/sensors"), nil, &resp); err != nil {
			return err
		}
		return c.table(resp.Sensors, []string{"name", "kind", "reading", "units", "status", "state", "lower_critical", "lower_warning", "upper_warning", "upper_critical"})
	})
	cc.Long = sensorsLong
	cc.Example = "  coordinator node sensors rf1\n  coordinator node sensors rf1 -c name -c status -f value\n  coordinator node sensors rf1 -f json"
	return annotate(cc, usesOutput)
}

func (c *cmd) nodeEvents() *cobra.Command {
	var since uint64
	cc := c.nodeArg("events NODE", "List the entries of a node's BMC event log (SEL, Redfish LogServices)", func(cl *client, id string) error {
		var resp struct {
			Events []map[string]any `json:"events"`
		}
		path := nodePath(id, "/events")
		if since > 0 {
			path += "?since=" + url.QueryEscape(strconv.FormatUint(since, 10))
		}
		if _, _, err := cl.do("GET", path, nil, &resp); err != nil {
			return err
		}
		return c.table(resp.Events, []string{"seq", "time", "severity", "log", "id", "message"})
	})
	cc.Flags().Uint64Var(&since, "since", 0, "list the entries after this seq (the last one you read)")
	cc.Long = eventsLong
	cc.Example = "  coordinator node events rf1\n  coordinator node events rf1 --since 42\n  coordinator node events rf1 -f json"
	return annotate(cc, usesOutput)
}
