package fsm

import (
	"maps"
	"slices"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// stepDecl is the declaration of step s as the coordinator knows it: an
// in-band step's is the standard ramdisk's (a ramdisk's own report
// carries no argument sources), an out-of-band step's the node's
// driver's.
func (m *Machine) stepDecl(n *Node, s *StepRun) (drivers.Step, bool) {
	if s.InBand {
		if d, ok := drivers.Standard(s.Interface, s.Step); ok {
			return d, true
		}
		return drivers.Find(drivers.InbandRescueSteps(), s.Interface, s.Step)
	}
	d, err := m.cfg.Drivers.Get(n.Driver)
	if err != nil {
		return drivers.Step{}, false
	}
	if st, ok := drivers.Find(d.CleanSteps, s.Interface, s.Step); ok {
		return st, true
	}
	return drivers.Find(d.DeploySteps, s.Interface, s.Step)
}

// stepArgs are the arguments of step s's command: the step's own, with
// what its declaration's ArgsFrom name filled in, in the order of
// drivers.ArgSources. It is the one place a step's arguments are made;
// no step is known here by name.
func (m *Machine) stepArgs(n *Node, s *StepRun) (map[string]any, error) {
	decl, _ := m.stepDecl(n, s)
	args := s.Args
	// set returns args with k set to v (the step's map is never changed).
	set := func(k string, v any) {
		args = maps.Clone(args)
		if args == nil {
			args = map[string]any{}
		}
		args[k] = v
	}
	for _, src := range drivers.ArgSources {
		if !slices.Contains(decl.ArgsFrom, src) {
			continue
		}
		switch src {
		case drivers.FromRescueHash:
			// Ironic's agent_client: the hash, marked as one.
			args = map[string]any{"rescue_password": n.Op.HashedRescuePassword, "hashed": true}
		case drivers.FromImage:
			img := map[string]any{}
			for _, k := range []string{"image_source", "image_checksum", "image_os_hash_algo", "image_os_hash_value", "image_disk_format", "root_device"} {
				if v, ok := n.InstanceInfo[k]; ok {
					img[k] = v
				}
			}
			maps.Copy(img, args)
			// The operator's rule on md5 and sha1, never a step's.
			delete(img, protocol.ArgAllowMD5Checksum)
			if m.cfg.AllowMD5Checksum {
				img[protocol.ArgAllowMD5Checksum] = true
			}
			args = img
		case drivers.FromConfigDrive:
			if n.ConfigDrive != "" {
				set("configdrive", n.ConfigDrive)
			}
		case drivers.FromRootDevice:
			// Ironic's root device hints live in the node's properties.
			if rd, ok := n.Properties["root_device"]; ok {
				if _, given := args["root_device"]; !given {
					set("root_device", rd)
				}
			}
		case drivers.FromDriverInfo:
			for _, name := range slices.Sorted(maps.Keys(decl.ArgsInfo)) {
				if _, given := args[name]; given {
					continue
				}
				if v, ok := n.DriverInfo[name]; ok {
					set(name, v)
				}
			}
		case drivers.FromProperties:
			props := map[string]any{}
			for _, k := range append([]string{"root_device"}, drivers.VerifiedProperties...) {
				if v, ok := n.Properties[k]; ok {
					props[k] = v
				}
			}
			set(drivers.ArgNodeProperties, props)
		case drivers.FromTargetRAID:
			if len(n.TargetRaidConfig) > 0 {
				set(drivers.ArgTargetRaidConfig, n.TargetRaidConfig)
			}
		case drivers.FromPowerPolicy:
			if n.DisablePowerOff {
				set(protocol.ArgDisablePowerOff, true)
			}
		case drivers.FromBurninPair:
			return m.burninNetworkArgs(n, args)
		case drivers.FromSecureBoot:
			if SecureBootRequested(n) {
				set(protocol.ArgSecureBoot, true)
			}
		}
	}
	return args, nil
}
