package cli

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"
)

func (c *cmd) portCmd() *cobra.Command {
	var node string
	create := clientCmd(&cobra.Command{
		Use:     "create MAC --node NODE",
		Short:   "Add a NIC to a node",
		Example: "  coordinator port create 52:54:00:12:34:02 --node n2",
		Args:    args("MAC"),
		RunE: func(_ *cobra.Command, a []string) error {
			if node == "" {
				return usagef("port create needs --node NODE, the node the NIC belongs to")
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			n, err := c.getNode(cl, node)
			if err != nil {
				return err
			}
			var p map[string]any
			if _, _, err := cl.do("POST", "/v1/ports", map[string]any{"address": a[0], "node_uuid": n["uuid"]}, &p); err != nil {
				return err
			}
			return c.record(p)
		},
	}, true)
	create.Flags().StringVar(&node, "node", "", "the `NODE` (name or UUID) the NIC belongs to (required)")
	_ = create.RegisterFlagCompletionFunc("node", func(cc *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		return c.nodeNames(cc), cobra.ShellCompDirectiveNoFileComp
	})

	var of string
	list := clientCmd(&cobra.Command{
		Use:   "list",
		Short: "List ports, of one node or all",
		Args:  args(),
		RunE: func(*cobra.Command, []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var resp struct {
				Ports []map[string]any `json:"ports"`
			}
			if _, _, err := cl.do("GET", "/v1/ports/detail?node="+url.QueryEscape(of), nil, &resp); err != nil {
				return err
			}
			return c.table(resp.Ports, []string{"uuid", "address", "node_uuid"})
		},
	}, true)
	list.Flags().StringVar(&of, "node", "", "only ports of this `NODE`")
	_ = list.RegisterFlagCompletionFunc("node", func(cc *cobra.Command, _ []string, _ string) ([]string, cobra.ShellCompDirective) {
		return c.nodeNames(cc), cobra.ShellCompDirectiveNoFileComp
	})

	del := clientCmd(&cobra.Command{
		Use:   "delete PORT",
		Short: "Delete a port",
		Long:  "Deletes a port; PORT is its UUID (see port list).",
		Args:  args("PORT"),
		RunE: func(_ *cobra.Command, a []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			if _, _, err := cl.do("DELETE", "/v1/ports/"+url.PathEscape(a[0]), nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "port %s deleted\n", a[0])
			return nil
		},
	}, false)
	return c.groupCmd("port", "Add, list and delete a node's NICs (ports)",
		"A port is a NIC of a node, named by its MAC address.", create, list, del)
}
