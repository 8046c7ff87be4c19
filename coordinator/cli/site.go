package cli

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// apiClient returns a client of the coordinator's API with the
// credentials and CA of the command line.
func (c *cmd) apiClient() (*client, error) {
	return newClient(c.ctx, c.url, c.creds)
}

// clientCmd marks cc as a client of the API, printing records when
// output is set, for the global flags its help shows.
func clientCmd(cc *cobra.Command, output bool) *cobra.Command {
	annotate(cc, usesClient)
	if output {
		annotate(cc, usesOutput)
	}
	return cc
}

func (c *cmd) siteCmd() *cobra.Command {
	var file string
	add := clientCmd(&cobra.Command{
		Use:   "add NAME --credentials-file FILE",
		Short: "Register a site and write its edge agent's credentials",
		Long: `Registers a site and writes (mode 0600) the JSON file its edge agent reads: site,
username, password and broker URL. The password is shown only there.`,
		Example: "  coordinator site add site1 --credentials-file site1.json\n  agent --credentials-file site1.json --simulate 8",
		Args:    args("NAME"),
		RunE: func(_ *cobra.Command, a []string) error {
			if file == "" {
				return usagef("site add needs --credentials-file FILE, where the edge agent's credentials are written")
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var resp map[string]any
			if _, _, err := cl.do("POST", "/v1/sites", map[string]string{"name": a[0]}, &resp); err != nil {
				return err
			}
			if err := writeSiteCreds(file, resp); err != nil {
				return fmt.Errorf("site %s was registered but its credentials could not be written: %v", a[0], err)
			}
			fmt.Fprintf(c.out, "site %s registered; edge agent credentials written to %s\n", a[0], file)
			return nil
		},
	}, false)
	add.Flags().StringVar(&file, "credentials-file", "", "`FILE` to write the edge agent's credentials to (required)")
	_ = add.MarkFlagFilename("credentials-file", "json")

	var rotFile string
	rotate := clientCmd(&cobra.Command{
		Use:   "rotate NAME --credentials-file FILE",
		Short: "Give a site's edge agent a new credential; the old one stops working at once",
		Long: `Replaces the MQTT credential of a site's edge agent, for a credentials file that
leaked or an edge machine that was replaced. The new credentials file is written
(mode 0600) as 'site add' writes it; the password is shown only there.

The old credential stops working at once: the coordinator's broker refuses it at the
next connect, publish or delivery, and closes the connections that used it. Until the
edge agent is restarted with the new file, the site is unreachable: its nodes do not
time out, and its results wait in the agent's outbox. With an external broker the
coordinator cannot close its connections; that broker's own authentication decides.`,
		Example: "  coordinator site rotate site1 --credentials-file site1.json\n  (copy site1.json to the edge machine, then restart its agent with it)",
		Args:    args("NAME"),
		RunE: func(_ *cobra.Command, a []string) error {
			if rotFile == "" {
				return usagef("site rotate needs --credentials-file FILE, where the edge agent's new credentials are written")
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var resp map[string]any
			if _, _, err := cl.do("POST", "/v1/sites/"+url.PathEscape(a[0])+"/credentials", nil, &resp); err != nil {
				return err
			}
			if err := writeSiteCreds(rotFile, resp); err != nil {
				return fmt.Errorf("site %s has a new credential, but it could not be written (run site rotate again; the old one no longer works): %v", a[0], err)
			}
			fmt.Fprintf(c.out, "site %s has a new credential, written to %s; the old one no longer works\n", a[0], rotFile)
			return nil
		},
	}, false)
	rotate.Flags().StringVar(&rotFile, "credentials-file", "", "`FILE` to write the edge agent's new credentials to (required)")
	_ = rotate.MarkFlagFilename("credentials-file", "json")

	del := clientCmd(&cobra.Command{
		Use:   "delete NAME",
		Short: "Remove a site that has no nodes; its edge agent's credential stops working",
		Long: `Removes a site: its edge agent's credential stops working at once (its connections
to the coordinator's broker are closed) and what the coordinator knew of its
reachability is forgotten. A site that still has nodes is refused: delete them, or
move them to another site with 'node set NODE --site SITE', first.`,
		Example: "  coordinator site delete site1",
		Args:    args("NAME"),
		RunE: func(_ *cobra.Command, a []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			if _, _, err := cl.do("DELETE", "/v1/sites/"+url.PathEscape(a[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "site %s deleted\n", a[0])
			return nil
		},
	}, false)

	list := clientCmd(&cobra.Command{
		Use:   "list",
		Short: "List the sites, whether their edge agent is online, and their nodes",
		Long: `Lists the sites: whether each edge agent is connected (online), when the site was
last seen (heard from, or known connected), since when it is unreachable, how many
results and reports wait in its edge agent for the coordinator's ack (queued, as of
its last heartbeat summary), and its nodes.

The nodes of an unreachable site do not time out for silence: their WAIT and command
timeouts count only the time the site was reachable. A site that does not come back
stays listed as offline, with its last-seen time, instead of failing its nodes. After
a restart of the coordinator every site is unreachable since it was last seen, until
its edge agent connects again. --column created_at adds when it was registered. A member
of a coordinator cluster adds a line with the cluster's members and which one leads.`,
		Args: args(),
		RunE: func(*cobra.Command, []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var resp struct {
				Sites []map[string]any `json:"sites"`
			}
			if _, _, err := cl.do("GET", "/v1/sites", nil, &resp); err != nil {
				return err
			}
			if err := c.table(resp.Sites, []string{"name", "online", "last_seen", "offline_since", "queued", "nodes"}); err != nil {
				return err
			}
			if c.format == "table" {
				c.clusterLine(cl)
			}
			return nil
		},
	}, true)
	return c.groupCmd("site", "Register, list, show, set, re-key and remove sites (one edge agent each)",
		"A site is one edge agent and the nodes it drives; a node's site is its conductor_group.", add, list, c.siteShowCmd(), c.siteSetCmd(), rotate, del, c.siteCacheCmd())
}

func (c *cmd) siteShowCmd() *cobra.Command {
	return clientCmd(&cobra.Command{
		Use:   "show NAME",
		Short: "Show a site: its edge agent's state, whether it discovers, and its discovered nodes",
		Long: `Shows a site as 'site list' does, with its discovery setting (discovery,
discovery_max_nodes, discovery_rate, discovery_driver), how many of its nodes discovery
enrolled (discovered) and those nodes (discovered_nodes: uuid, provision_state, driver,
created_at, last_error). Delete a discovered node as any other: coordinator node delete NODE.`,
		Example: "  coordinator site show site1",
		Args:    args("NAME"),
		RunE: func(_ *cobra.Command, a []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var resp map[string]any
			if _, _, err := cl.do("GET", "/v1/sites/"+url.PathEscape(a[0]), nil, &resp); err != nil {
				return err
			}
			if c.format != "table" || len(c.columns) > 0 {
				return c.record(resp)
			}
			found, _ := resp["discovered_nodes"].([]any)
			delete(resp, "discovered_nodes")
			if err := c.record(resp); err != nil {
				return err
			}
			if len(found) == 0 {
				return nil
			}
			fmt.Fprintln(c.out, "\ndiscovered nodes:")
			rows := make([]map[string]any, 0, len(found))
			for _, x := range found {
				if m, ok := x.(map[string]any); ok {
					rows = append(rows, m)
				}
			}
			return c.table(rows, []string{"uuid", "provision_state", "driver", "created_at", "last_error"})
		},
	}, true)
}

func (c *cmd) siteSetCmd() *cobra.Command {
	var discovery string
	var maxNodes, rate int
	var driver string
	cc := clientCmd(&cobra.Command{
		Use:   "set NAME [--discovery on|off] [--discovery-max-nodes N] [--discovery-rate N] [--discovery-driver DRIVER]",
		Short: "Change a site's discovery setting",
		Long: `Turns discovery on or off at a site and sets its bounds. With discovery on, the site's
edge agent answers network boot for machines that belong to no node, boots them into the
ramdisk in discovery mode and sends each one's inventory to the coordinator, which enrolls
one node per machine (in enroll, driver --discovery-driver unless an inspection rule sets
one, a port per MAC, the BMC address the ramdisk read). A machine that is a node already
(by MAC, serial or BMC address) is never enrolled again. Off is the default.

--discovery-max-nodes caps the site's discovered nodes (default 50); --discovery-rate bounds
the new machines its edge agent starts discovering per minute (default 10), and the nodes
the coordinator enrolls of the site per minute (a report past it waits at the site). Refusals are
counted on /metrics (bmedge_discovery_reports_total). docs/discovery.md has the details.`,
		Example: "  coordinator site set site1 --discovery on --discovery-max-nodes 40 --discovery-driver ipmi\n  coordinator site set site1 --discovery off",
		Args:    args("NAME"),
		RunE: func(cc *cobra.Command, a []string) error {
			body := map[string]any{}
			switch discovery {
			case "":
			case "on":
				body["discovery"] = true
			case "off":
				body["discovery"] = false
			default:
				return usagef("--discovery takes on or off, not %q", discovery)
			}
			if cc.Flags().Changed("discovery-max-nodes") {
				body["discovery_max_nodes"] = maxNodes
			}
			if cc.Flags().Changed("discovery-rate") {
				body["discovery_rate"] = rate
			}
			if cc.Flags().Changed("discovery-driver") {
				body["discovery_driver"] = driver
			}
			if len(body) == 0 {
				return usagef("site set needs something to change: --discovery on|off, --discovery-max-nodes N, --discovery-rate N or --discovery-driver DRIVER")
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var resp map[string]any
			if _, _, err := cl.do("PATCH", "/v1/sites/"+url.PathEscape(a[0]), body, &resp); err != nil {
				return err
			}
			delete(resp, "discovered_nodes")
			return c.record(resp)
		},
	}, true)
	cc.Flags().StringVar(&discovery, "discovery", "", "`on` or off: whether the site discovers machines that belong to no node")
	cc.Flags().IntVar(&maxNodes, "discovery-max-nodes", 0, "the cap of the site's discovered nodes (`N`, 1 to 10000)")
	cc.Flags().IntVar(&rate, "discovery-rate", 0, "the new machines the site's edge agent starts discovering, and the nodes the coordinator enrolls of the site, per minute (`N`, 1 to 600)")
	cc.Flags().StringVar(&driver, "discovery-driver", "", "the `DRIVER` of a discovered node unless an inspection rule sets one (default ipmi)")
	return cc
}

// writeSiteCreds writes the edge agent's credentials file, mode 0600: to
// a new file renamed over FILE, so that an existing FILE's wider mode is
// not kept and a failed write leaves the old file whole.
func writeSiteCreds(file string, creds map[string]any) error {
	b, _ := json.MarshalIndent(creds, "", "  ")
	f, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after the rename, a no-op
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), file)
}
