package bmc

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// Hardware RAID steps (raid_interface redfish): the coordinator sends
// raid.create_configuration, raid.apply_configuration and
// raid.delete_configuration out of band only for a node whose RAID is
// its BMC's; the driver runs the step and reads the volumes back, and
// the resulting raid_config goes back in the command's result data
// under "raid_config" (protocol.Message.Data), which the coordinator
// stores on the node. A node with raid_interface agent never sends
// these here: its ramdisk runs them.

// DataRAIDConfig is the result data key of a hardware RAID step's
// raid_config, {"logical_disks": [...]}.
const DataRAIDConfig = "raid_config"

// runRAIDStep runs a hardware RAID step on b and leaves the raid_config
// it reports in the command's result data. The raid_config is bounded
// (drivers.MaxRAIDVolumes volumes, drivers.MaxRAIDConfigBytes encoded):
// a BMC that reports more fails the step rather than flood the node.
func runRAIDStep(ctx context.Context, b drivers.BMC, s *protocol.Step) error {
	rs, ok := b.(drivers.RAIDStepper)
	if !ok {
		return fmt.Errorf("step %s.%s: this BMC's driver has no hardware RAID; set the node's raid_interface to agent (software RAID in the ramdisk)", s.Interface, s.Step)
	}
	rc, err := rs.RunRAIDStep(ctx, s.Interface+"."+s.Step, s.Args)
	if err != nil {
		return err
	}
	enc, err := json.Marshal(rc)
	if err != nil {
		return fmt.Errorf("step %s.%s: the raid_config read back cannot be encoded: %v", s.Interface, s.Step, err)
	}
	if len(enc) > drivers.MaxRAIDConfigBytes {
		return fmt.Errorf("step %s.%s done, but the raid_config read back is %d bytes, more than the %d a node holds", s.Interface, s.Step, len(enc), drivers.MaxRAIDConfigBytes)
	}
	putData(ctx, DataRAIDConfig, rc)
	return nil
}
