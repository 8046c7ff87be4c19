package cli

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bmedge/bmedge/coordinator/cluster"
)

const clusterLong = `Shows and changes the members of a coordinator cluster (serve --cluster-member,
--cluster-listen, --cluster-peers). Any member answers: status is that member's own view
(it asks every other member for its report over the cluster link), and the changes are
done by the leader, to which a follower forwards them. docs/cluster.md says how to form a
cluster, add and remove members and recover from the loss of a majority.`

func (c *cmd) clusterCmd() *cobra.Command {
	status := clientCmd(&cobra.Command{
		Use:   "status",
		Short: "Show the cluster's members, their roles and which one leads",
		Long: `Shows every member of the cluster with its name, cluster-link address, role (leader,
follower, candidate, or unreachable when it did not answer), when it last heard from the
leader, and the last entry of the replicated log applied to its store. -f json prints
{member, leader, members: [...]}, member being the member that answered.`,
		Example: "  coordinator --url https://10.0.0.11:6385 cluster status\n  coordinator cluster status -f json",
		Args:    args(),
		RunE: func(*cobra.Command, []string) error {
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			var st map[string]any
			if _, _, err := cl.do("GET", "/v1/cluster", nil, &st); err != nil {
				return err
			}
			if c.format == "json" || c.format == "yaml" {
				return c.structured(st)
			}
			var rows []map[string]any
			ms, _ := st["members"].([]any)
			for _, m := range ms {
				if r, ok := m.(map[string]any); ok {
					rows = append(rows, r)
				}
			}
			if err := c.table(rows, []string{"name", "address", "role", "last_contact", "applied_index"}); err != nil {
				return err
			}
			if c.format == "table" {
				leader, _ := st["leader"].(string)
				if leader == "" {
					leader = "none (no majority, or an election is under way)"
				}
				fmt.Fprintf(c.out, "leader: %s (as member %v sees it)\n", leader, st["member"])
			}
			return nil
		},
	}, true)
	add := clientCmd(&cobra.Command{
		Use:   "add-member NAME HOST:PORT",
		Short: "Add a member to the cluster",
		Long: `Adds a voting member named NAME whose cluster link listens on HOST:PORT. Then start it:
its data folder empty but for the cluster's db.key and secret, with a member certificate
of the cluster's CA, and --cluster-peers listing every member, itself included; it receives
a snapshot and the log from the leader.`,
		Example: "  coordinator cluster add-member c4 10.0.0.14:7000",
		Args:    args("NAME", "HOST:PORT"),
		RunE: func(_ *cobra.Command, a []string) error {
			return c.clusterChange("POST", "/v1/cluster/members", map[string]string{"name": a[0], "address": a[1]},
				fmt.Sprintf("member %s (%s) added", a[0], a[1]))
		},
	}, false)
	remove := clientCmd(&cobra.Command{
		Use:     "remove-member NAME",
		Short:   "Remove a member from the cluster",
		Long:    `Removes the member NAME from the cluster (the leader too: another member then leads). Stop its process afterwards.`,
		Example: "  coordinator cluster remove-member c3",
		Args:    args("NAME"),
		RunE: func(_ *cobra.Command, a []string) error {
			return c.clusterChange("DELETE", "/v1/cluster/members/"+url.PathEscape(a[0]), nil, fmt.Sprintf("member %s removed", a[0]))
		},
	}, false)
	transfer := clientCmd(&cobra.Command{
		Use:     "transfer-leadership [NAME]",
		Short:   "Hand the leadership to another member",
		Long:    `Makes the member NAME the leader, or any up-to-date member without NAME (before stopping the leader for an upgrade, say).`,
		Example: "  coordinator cluster transfer-leadership c2",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, a []string) error {
			name := ""
			if len(a) == 1 {
				name = a[0]
			}
			return c.clusterChange("PUT", "/v1/cluster/leader", map[string]string{"name": name}, "leadership transferred")
		},
	}, false)
	var rdata, rname, rlisten string
	rec := &cobra.Command{
		Use:   "recover --data-dir DIR --cluster-member NAME --cluster-listen HOST:PORT",
		Short: "Make one member's data a new cluster of one, after the loss of a majority",
		Long: `Run on a stopped member when a majority of the cluster is lost for good (the cluster
then has no leader and the API answers 503): it makes this member's data the whole of a new
cluster whose only member is NAME at HOST:PORT. Every entry of its replicated log counts as
committed; what only the lost members held is lost (choose the member whose 'cluster status'
showed the highest applied index). Then start it with --cluster-peers NAME=HOST:PORT (itself
alone): it leads at once; add the other members with 'cluster add-member', each started
with an empty data folder holding the cluster's db.key and secret. Never run it while the
old cluster can still come back: two clusters would then take writes.`,
		Example: "  coordinator cluster recover --data-dir /var/lib/bmedge --cluster-member c1 --cluster-listen 10.0.0.11:7000",
		Args:    args(),
		RunE: func(*cobra.Command, []string) error {
			if rdata == "" || rname == "" || rlisten == "" {
				return usagef("cluster recover needs --data-dir DIR, --cluster-member NAME and --cluster-listen HOST:PORT of the stopped member")
			}
			if err := cluster.Recover(rdata, rname, rlisten, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "member %s is now a cluster of one; start it with --cluster-member %s --cluster-listen %s --cluster-peers %s=%s\n", rname, rname, rlisten, rname, rlisten)
			return nil
		},
	}
	var idata string
	initKeys := &cobra.Command{
		Use:   "init-keys --data-dir DIR",
		Short: "Make the cluster's db.key and secret, once, to copy to every member",
		Long: `Writes a new db.key (the key that encrypts the store, the replicated log and its
snapshots) and secret (from which the credentials handed to sites and ramdisks derive) into
DIR, mode 0600. Every member's data folder needs the same two files before its first start:
copy them (scp -p, mode 0600) into each member's --data-dir. It refuses to replace either.`,
		Example: "  coordinator cluster init-keys --data-dir /var/lib/bmedge\n  scp -p /var/lib/bmedge/db.key /var/lib/bmedge/secret c2:/var/lib/bmedge/",
		Args:    args(),
		RunE: func(*cobra.Command, []string) error {
			if idata == "" {
				return usagef("cluster init-keys needs --data-dir DIR")
			}
			if err := cluster.InitKeys(idata); err != nil {
				return err
			}
			fmt.Fprintf(c.out, "wrote %s/db.key and %s/secret; copy both into every member's --data-dir before its first start\n", idata, idata)
			return nil
		},
	}
	initKeys.Flags().StringVar(&idata, "data-dir", "", "the data `DIR` to write them into (made if missing)")
	rf := rec.Flags()
	rf.StringVar(&rdata, "data-dir", "", "the stopped member's data `DIR`")
	rf.StringVar(&rname, "cluster-member", "", "its member `NAME`")
	rf.StringVar(&rlisten, "cluster-listen", "", "its cluster link `HOST:PORT`")
	return c.groupCmd("cluster", "Show and change the members of a coordinator cluster", clusterLong, status, add, remove, transfer, rec, initKeys)
}

func (c *cmd) clusterChange(method, path string, body any, done string) error {
	cl, err := c.apiClient()
	if err != nil {
		return err
	}
	if _, _, err := cl.do(method, path, body, nil); err != nil {
		return err
	}
	fmt.Fprintln(c.out, done)
	return nil
}

// clusterLine prints the cluster's members and leader after site list,
// when the coordinator is a cluster member (a single one answers 404
// and nothing is printed).
func (c *cmd) clusterLine(cl *client) {
	var st struct {
		Leader  string `json:"leader"`
		Members []struct {
			Name string `json:"name"`
			Role string `json:"role"`
		} `json:"members"`
	}
	if _, _, err := cl.do("GET", "/v1/cluster", nil, &st); err != nil || len(st.Members) == 0 {
		return
	}
	parts := make([]string, len(st.Members))
	for i, m := range st.Members {
		parts[i] = m.Name + " (" + m.Role + ")"
	}
	leader := st.Leader
	if leader == "" {
		leader = "none"
	}
	fmt.Fprintf(c.out, "cluster: leader %s; members %s\n", leader, strings.Join(parts, ", "))
}
