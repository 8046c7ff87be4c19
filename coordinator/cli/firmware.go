package cli

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/bmedge/bmedge/drivers"
	"github.com/spf13/cobra"
)

// node firmware and node bios read what the node's BMC reported through
// the edge agent (API 1.86 and 1.40, registry fields 1.74); the client
// asks for the latest API version, which has them all.

const firmwareLong = `Lists the node's firmware components (API 1.86) as its BMC reported them: the version
found when the node was first managed (initial_version), the one running now
(current_version) and the last one a firmware.update step flashed
(last_version_flashed, - until one has). They are read at manage, after
firmware.update and after the BIOS steps; a driver without out-of-band firmware
(fake, ipmi) reports none, and the list is empty.`

func (c *cmd) nodeFirmware() *cobra.Command {
	cc := c.nodeArg("firmware NODE", "List a node's firmware components and their versions", func(cl *client, id string) error {
		var resp struct {
			Firmware []map[string]any `json:"firmware"`
		}
		if _, _, err := cl.do("GET", nodePath(id, "/firmware"), nil, &resp); err != nil {
			return err
		}
		return c.table(resp.Firmware, []string{"component", "initial_version", "current_version", "last_version_flashed", "created_at", "updated_at"})
	})
	cc.Long = firmwareLong
	cc.Example = "  coordinator node firmware rf1\n  coordinator node firmware rf1 -c component -c current_version -f value\n  coordinator node firmware rf1 -f json"
	return annotate(cc, usesOutput)
}

// biosRegistryColumns are the BIOS registry's fields (API 1.74) that
// node bios --detail adds to name and value.
var biosRegistryColumns = []string{"attribute_type", "allowable_values", "lower_bound", "upper_bound", "min_length", "max_length",
	"read_only", "reset_required", "unique"}

const biosLong = `Lists the node's BIOS settings (API 1.40) as its BMC reported them, by name with their
value; --detail adds the BIOS registry's description of each (API 1.74): its
attribute_type (Enumeration, Integer, String, Boolean), allowable_values,
lower_bound and upper_bound, min_length and max_length, read_only, reset_required
(a change takes effect at the next reboot) and unique. With SETTING, shows that
one setting with every field; a setting the node does not have is an error
(exit 1). As Ironic's 'baremetal node bios setting list' and 'setting show'.

The settings are read at manage and again after the bios steps of a clean, deploy
or service (such as bios.apply_configuration); a driver without
out-of-band BIOS access (fake, ipmi) reports none, and the list is empty.`

func (c *cmd) nodeBIOS() *cobra.Command {
	var detail bool
	cc := clientCmd(&cobra.Command{
		Use:   "bios NODE [SETTING]",
		Short: "List a node's BIOS settings, or show one",
		Long:  biosLong,
		Example: "  coordinator node bios rf1\n  coordinator node bios rf1 --detail -f json\n" +
			"  coordinator node bios rf1 ProcVirtualization\n  coordinator node bios rf1 ProcVirtualization -c value -f value",
		Args: func(cc *cobra.Command, a []string) error {
			if len(a) == 1 || len(a) == 2 {
				return nil
			}
			return usagef("%s takes NODE and at most one SETTING; got %d arguments", cc.CommandPath(), len(a))
		},
		ValidArgsFunction: c.completeNode,
		RunE: func(_ *cobra.Command, a []string) error {
			if len(a) == 2 && detail {
				return usagef("--detail is for the list; a SETTING is shown with every field already")
			}
			cl, err := c.apiClient()
			if err != nil {
				return err
			}
			if len(a) == 2 {
				var resp map[string]map[string]any
				if _, _, err := cl.do("GET", nodePath(a[0], "/bios/", url.PathEscape(a[1])), nil, &resp); err != nil {
					return err
				}
				s, ok := resp[a[1]]
				if !ok {
					return fmt.Errorf("unexpected answer from the coordinator: no setting %q in it", a[1])
				}
				return c.record(s)
			}
			path := nodePath(a[0], "/bios")
			cols := []string{"name", "value"}
			if detail {
				path += "?detail=True"
				cols = append(cols, biosRegistryColumns...)
			}
			var resp struct {
				BIOS []map[string]any `json:"bios"`
			}
			if _, _, err := cl.do("GET", path, nil, &resp); err != nil {
				return err
			}
			return c.table(resp.BIOS, cols)
		},
	}, true)
	cc.Flags().BoolVar(&detail, "detail", false, "add the BIOS registry's fields: "+strings.Join(biosRegistryColumns, ", ")+" (default: name and value)")
	return cc
}

// raidInterfaces are the raid_interface values of the drivers this
// program ships: agent (the default), no-raid and each driver's own
// hardware RAID, for help and completion.
func raidInterfaces() (all, hardware []string) {
	all = []string{drivers.RAIDAgent, drivers.RAIDNone}
	for _, d := range drivers.Builtin() {
		if hw := d.HardwareRAID(); hw != "" {
			hardware = append(hardware, hw)
		}
	}
	return append(all, hardware...), hardware
}

// raidInterfaceUsage is the help of --raid-interface.
func raidInterfaceUsage() string {
	_, hw := raidInterfaces()
	return "the node's RAID `INTERFACE` (API 1.31): agent, software RAID the ramdisk builds (the default); no-raid, none; " +
		"or the driver's hardware RAID, out of band (" + strings.Join(hw, ", ") + ")"
}

// inspectInterfaceUsage is the --inspect-interface flag's help.
func inspectInterfaceUsage() string {
	return "the node's inspect `INTERFACE`: agent, the ramdisk boots and reads the hardware in band (the default); " +
		"or redfish, the BMC's own reading out of band, without a ramdisk boot (Redfish nodes; docs/drivers.md)"
}

func allRAIDInterfaces() []string {
	all, _ := raidInterfaces()
	return all
}
