package cli

import (
	"fmt"
	"net/url"

	"github.com/spf13/cobra"
)

const traitLong = `A node's traits (API 1.37) say what it is or may run: deploy templates apply to a
deploy that asks for traits the node has (instance_info/traits), runbooks run
only on nodes that have a trait of the runbook's name. A trait is CUSTOM_
followed by capital letters, digits and underscores (CUSTOM_BIOS_TUNED), or a
standard os-traits name (HW_CPU_X86_AVX2); a node has at most 50. Traits
change in any provision state, but not while the coordinator works on the
node (HTTP 409: retry when it rests).`

func (c *cmd) nodeTraitCmd() *cobra.Command {
	list := c.nodeArg("list NODE", "List a node's traits", func(cl *client, id string) error {
		var resp struct {
			Traits []string `json:"traits"`
		}
		if _, _, err := cl.do("GET", nodePath(id, "/traits"), nil, &resp); err != nil {
			return err
		}
		rows := make([]map[string]any, 0, len(resp.Traits))
		for _, t := range resp.Traits {
			rows = append(rows, map[string]any{"trait": t})
		}
		return c.table(rows, []string{"trait"})
	})
	annotate(list, usesOutput)
	list.Example = "  coordinator node trait list n1\n  coordinator node trait list n1 -f value"

	add := clientCmd(&cobra.Command{
		Use:               "add NODE TRAIT...",
		Short:             "Add traits to a node",
		Long:              "Adds each TRAIT to the node; a trait it has already is left as it is.",
		Example:           "  coordinator node trait add n1 CUSTOM_BIOS_TUNED HW_CPU_X86_AVX2",
		Args:              nodeAndTraits(false),
		ValidArgsFunction: c.completeNode,
		RunE: func(_ *cobra.Command, a []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			for _, t := range a[1:] {
				if _, _, err := cl.do("PUT", nodePath(a[0], "/traits/", url.PathEscape(t)), nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(c.out, "node %s: trait %s added\n", a[0], t)
			}
			return nil
		},
	}, false)

	var all bool
	remove := clientCmd(&cobra.Command{
		Use:               "remove NODE TRAIT... | remove NODE --all",
		Short:             "Remove traits from a node",
		Long:              "Removes each TRAIT from the node (a trait it does not have is an error), or with --all every trait.",
		Example:           "  coordinator node trait remove n1 CUSTOM_BIOS_TUNED\n  coordinator node trait remove n1 --all",
		Args:              nodeAndTraits(true),
		ValidArgsFunction: c.completeNode,
		RunE: func(_ *cobra.Command, a []string) error {
			if all == (len(a) > 1) {
				return usagef("node trait remove takes either TRAIT... or --all")
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			if all {
				if _, _, err := cl.do("DELETE", nodePath(a[0], "/traits"), nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(c.out, "node %s: all traits removed\n", a[0])
				return nil
			}
			for _, t := range a[1:] {
				if _, _, err := cl.do("DELETE", nodePath(a[0], "/traits/", url.PathEscape(t)), nil, nil); err != nil {
					return err
				}
				fmt.Fprintf(c.out, "node %s: trait %s removed\n", a[0], t)
			}
			return nil
		},
	}, false)
	remove.Flags().BoolVar(&all, "all", false, "remove every trait of the node")
	return c.groupCmd("trait", "List, add and remove a node's traits", traitLong, list, add, remove)
}

// nodeAndTraits wants NODE and at least one TRAIT (or, when bare is
// allowed, NODE alone: remove --all).
func nodeAndTraits(bare bool) cobra.PositionalArgs {
	return func(cc *cobra.Command, a []string) error {
		if len(a) == 0 {
			return usagef("%s takes NODE and one or more TRAIT", cc.CommandPath())
		}
		if len(a) == 1 && !bare {
			return usagef("%s takes NODE and one or more TRAIT; got only %q", cc.CommandPath(), a[0])
		}
		return nil
	}
}
