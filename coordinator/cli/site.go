package cli

import (
	"encoding/json"
	"fmt"
	"os"

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
			b, _ := json.MarshalIndent(resp, "", "  ")
			if err := os.WriteFile(file, append(b, '\n'), 0o600); err != nil {
				return fmt.Errorf("site %s was registered but its credentials could not be written: %v", a[0], err)
			}
			fmt.Fprintf(c.out, "site %s registered; edge agent credentials written to %s\n", a[0], file)
			return nil
		},
	}, false)
	add.Flags().StringVar(&file, "credentials-file", "", "`FILE` to write the edge agent's credentials to (required)")
	_ = add.MarkFlagFilename("credentials-file", "json")

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
its edge agent connects again. --column created_at adds when it was registered.`,
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
			return c.table(resp.Sites, []string{"name", "online", "last_seen", "offline_since", "queued", "nodes"})
		},
	}, true)
	return c.groupCmd("site", "Register and list sites (one edge agent each)",
		"A site is one edge agent and the nodes it drives; a node's site is its conductor_group.", add, list, c.siteCacheCmd())
}
