package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// DocCommand is the command that regenerates docs/cli.md.
const DocCommand = "make cli-doc (go run ./coordinator/cli/gendoc docs/cli.md)"

// WriteMarkdown writes docs/cli.md: every command of the tree with its
// usage line, texts, flags and their defaults, as its --help shows them.
// It depends on nothing but the tree: no variable, no host.
func WriteMarkdown(w io.Writer) error {
	c := &cmd{ctx: context.Background(), stdin: strings.NewReader(""), out: io.Discard, err: io.Discard}
	root := c.newRoot()
	var b strings.Builder
	fmt.Fprintf(&b, "# The `coordinator` command\n\n")
	fmt.Fprintf(&b, "<!-- Generated from the command tree in coordinator/cli by %s.\n", DocCommand)
	fmt.Fprintf(&b, "     Edit the commands' Short, Long and Example texts there, not this file: its test fails while it is stale. -->\n\n")
	fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(root.Long))
	fmt.Fprintf(&b, "```\n%s\n```\n\n", strings.TrimSpace(usageLines(root)))
	b.WriteString("## Global flags\n\nThey may stand anywhere on the line; each command's help shows those it uses.\n\n")
	flagTable(&b, root.PersistentFlags())
	b.WriteString("\n## Commands\n\n| command | what it does |\n|---|---|\n")
	walk(root, func(cc *cobra.Command, _ int) {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", cc.CommandPath(), anchor(cc.CommandPath()), cell1(cc.Short))
	})
	walk(root, func(cc *cobra.Command, depth int) {
		b.WriteString("\n")
		commandSection(&b, cc, depth)
	})
	b.WriteString("\n")
	b.WriteString(agentSection)
	_, err := io.WriteString(w, b.String())
	return err
}

// walk visits the documented commands below root, depth first, in the
// order of their help.
func walk(root *cobra.Command, f func(*cobra.Command, int)) {
	var rec func(*cobra.Command, int)
	rec = func(cc *cobra.Command, depth int) {
		for _, sub := range cc.Commands() {
			if !sub.IsAvailableCommand() || sub.Name() == "help" {
				continue
			}
			f(sub, depth)
			rec(sub, depth+1)
		}
	}
	rec(root, 0)
}

// usageLines are the Usage lines of cc's help.
func usageLines(cc *cobra.Command) string {
	if cc.HasAvailableSubCommands() {
		return cc.CommandPath() + " COMMAND"
	}
	return cc.UseLine()
}

func commandSection(b *strings.Builder, cc *cobra.Command, depth int) {
	fmt.Fprintf(b, "%s %s\n\n", strings.Repeat("#", 2+min(depth, 2)), cc.CommandPath())
	text := cc.Long
	if text == "" {
		text = cc.Short + "."
	}
	fmt.Fprintf(b, "```\n%s\n```\n\n%s\n", usageLines(cc), strings.TrimSpace(text))
	if cc.HasAvailableSubCommands() {
		b.WriteString("\n| command | what it does |\n|---|---|\n")
		for _, sub := range cc.Commands() {
			if sub.IsAvailableCommand() {
				fmt.Fprintf(b, "| [`%s`](#%s) | %s |\n", sub.Name(), anchor(sub.CommandPath()), cell1(sub.Short))
			}
		}
	}
	local := pflag.NewFlagSet(cc.Name(), pflag.ContinueOnError)
	local.SortFlags = cc.Flags().SortFlags
	cc.LocalFlags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "help" {
			local.AddFlag(f)
		}
	})
	if local.HasAvailableFlags() {
		b.WriteString("\n")
		flagTable(b, local)
	}
	var globals []string
	shownFlags(cc).VisitAll(func(f *pflag.Flag) { globals = append(globals, "`--"+f.Name+"`") })
	if len(globals) > 0 && !cc.HasAvailableSubCommands() {
		fmt.Fprintf(b, "\nGlobal flags: %s.\n", strings.Join(globals, ", "))
	}
	if cc.HasExample() {
		fmt.Fprintf(b, "\n```sh\n%s\n```\n", dedent(cc.Example))
	}
}

// flagTable is a table of flags as their help shows them.
func flagTable(b *strings.Builder, fs *pflag.FlagSet) {
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name, usage := pflag.UnquoteUsage(f)
		spell := "--" + f.Name
		if f.Shorthand != "" {
			spell = "-" + f.Shorthand + ", " + spell
		}
		switch {
		case f.NoOptDefVal != "" && f.Value.Type() == "bool" && f.NoOptDefVal != "true":
			spell += "[=" + f.NoOptDefVal + "]"
		case f.NoOptDefVal != "" && f.Value.Type() == "bool":
		case name != "":
			spell += " " + name
		}
		def := ""
		switch f.DefValue {
		case "", "0", "false", "[]":
		default:
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s |\n", strings.ReplaceAll(spell, "|", `\|`), def, cell1(usage))
	})
}

// cell1 makes text fit a table cell.
func cell1(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

// anchor is GitHub's anchor of a heading.
func anchor(heading string) string {
	return strings.ReplaceAll(strings.ToLower(heading), " ", "-")
}

func dedent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "  ")
	}
	return strings.Join(lines, "\n")
}

// agentSection is the edge agent's, another program: kept here by hand
// so that docs/cli.md still covers both binaries an operator runs.
const agentSection = "## Edge agent (the `agent` program)\n\n" +
	"```\n" +
	"agent --credentials-file FILE [--state-dir DIR] [--outbox-limit 100000] [--ca-file CA]\n" +
	"      [--power-sync-interval 60s] [--health-interval 0] [--sensor-interval 10m] [--bmc-concurrency 32]\n" +
	"      [--site-broker-listen ADDR [--site-broker-url URL] [--site-broker-tls-cert C --site-broker-tls-key K | --site-broker-insecure]] [--heartbeat-summary 10s]\n" +
	"      [--ramdisk-iso ISO --media-listen ADDR [--media-url URL] [--ramdisk-params P]]\n" +
	"      [--metrics-listen ADDR [--metrics-listen-any]]\n" +
	"      [--netboot-interface IFACE --netboot-kernel K --netboot-initrd I (--netboot-dhcp-range FIRST-LAST | --netboot-dhcp-mode proxy)]\n" +
	"      [--image-cache-dir DIR --image-cache-listen ADDR [--image-cache-url URL] [--image-cache-size 50GiB]]\n" +
	"      [--fetch-allow CIDR]... [--bmc-network CIDR]...\n" +
	"      [--simulate N [--step-duration 2s] [--boot-delay 1s] [--heartbeat 5s] [--fail-step STEP] [--die-step STEP] [--no-boot] [--simulate-lldp] [--simulate-health]]\n" +
	"      [--qemu-kernel K --qemu-initrd I --qemu-broker-url URL [--qemu-cmdline P]]\n" +
	"```\n\n" +
	"`agent --help` explains every flag. Results wait in a durable outbox (Badger, encrypted,\n" +
	"under `--state-dir`, default `<credentials-file>.state`) until the coordinator acknowledges\n" +
	"them, so a kill -9 loses none. Without `--simulate` it drives the site's real BMCs\n" +
	"(drivers ipmi and redfish), at most `--bmc-concurrency` commands at once.\n\n" +
	"`--site-broker-listen` runs the site's own MQTT broker for the ramdisks (docs/edge.md): the\n" +
	"ramdisks it boots connect there, each with its boot's credential, never across the WAN; the\n" +
	"agent relays over its one connection, keeps their results in its outbox and sends their\n" +
	"heartbeats as one summary per `--heartbeat-summary`. Without it, `--ramdisk-broker-url`\n" +
	"names the broker the ramdisks use. Plain MQTT (no `--site-broker-tls-cert`) on an address\n" +
	"that is not loopback is refused unless `--site-broker-insecure` says so (a lab network).\n" +
	"`--ramdisk-iso` (make ramdisk: build/ramdisk/bmramdisk.iso) lets it boot redfish nodes\n" +
	"into the ramdisk from virtual media: it serves the ISO and each boot's parameters image on\n" +
	"`--media-listen` (docs/drivers.md, Booting the ramdisk from virtual media).\n\n" +
	"`--netboot-interface` (the site network), `--netboot-kernel` and `--netboot-initrd` (make\n" +
	"ramdisk: build/ramdisk/vmlinuz and initramfs.cpio.zst) let it boot ipmi nodes into the\n" +
	"ramdisk by network boot: DHCP leasing `--netboot-dhcp-range` (or `--netboot-dhcp-mode proxy`\n" +
	"beside the site's own DHCP server), TFTP of Debian's iPXE binaries, HTTP of each boot's\n" +
	"iPXE script, kernel and initramfs on `--netboot-http-port` (8082), answering only the MACs\n" +
	"of the nodes it is booting (docs/netboot.md).\n\n" +
	"`--image-cache-dir` and `--image-cache-listen` keep a site image cache (docs/imagecache.md):\n" +
	"write_image fetches its image through the agent, which downloads it once over the WAN while\n" +
	"streaming it to every node waiting for it, verifies its checksum before it counts as cached\n" +
	"(a partial or mismatching download is never served complete), and keeps it on disk under\n" +
	"`--image-cache-size` (least recently used first out). `coordinator site cache` pre-seeds it;\n" +
	"simulated nodes fetch through it too.\n\n" +
	"What the agent fetches for an operator (images, firmware, config drives) never comes from\n" +
	"loopback, a link-local address (169.254.169.254 included), the agent's own listeners or the\n" +
	"site's BMCs (those it knows and `--bmc-network`), checked on the address dialled and at\n" +
	"every redirect; `--fetch-allow CIDR` allows a network (e.g. `127.0.0.0/8` for an image\n" +
	"server on the agent's host). A config drive must be an ISO 9660 or VFAT image, or its\n" +
	"gzipped base64 text, before a node gets it (docs/security.md).\n\n" +
	"`--power-sync-interval` (default 60s, 0 disables): how often the agent reads the power\n" +
	"state of its site's real BMCs (ipmi, redfish, qemu-dev; not simulated ones), 8 at a\n" +
	"time; it reports only changes and failures (docs/drivers.md, Power-state sync). With the\n" +
	"power reading it reads the hardware's health, sensors and event log of the BMCs that\n" +
	"tell them (redfish, ipmi) when the last reading is `--health-interval` old (0: every\n" +
	"round), and sends what changed, the sensors at least every `--sensor-interval`\n" +
	"(docs/remote-hands.md).\n\n" +
	"Per-node failure injection through driver_info: `fake_fail_step=STEP` (the step fails),\n" +
	"`fake_die_step=STEP` (the ramdisk goes silent mid-step: the node fails at its WAIT\n" +
	"timeout), `fake_reboot_step=STEP` (the ramdisk reboots on its own mid-step: the node\n" +
	"fails at once, naming both boots), `fake_no_boot=true`, `fake_step_seconds=N`,\n" +
	"`fake_fail_validate=TEXT`. With `--simulate-health` the simulated BMCs tell their health,\n" +
	"sensors and event log: `fake_fail_sensor=NAME` fails one (`Fan 2`, `CPU 1 Temp`, `PSU 2`,\n" +
	"`12V`, ...; the node turns Critical), `fake_health=OK|Warning|Critical|none` sets the\n" +
	"system's own (docs/remote-hands.md).\n"
