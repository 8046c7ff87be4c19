package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/bmedge/bmedge/coordinator/configdrive"
	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
)

// Versions of the provision request's configdrive and disable_ramdisk
// (Ironic's MINOR_35_REBUILD_CONFIG_DRIVE, _56_BUILD_CONFIGDRIVE,
// _59_CONFIGDRIVE_VENDOR_DATA, _70_CLEAN_DISABLE_RAMDISK and
// _108_SERVICE_DISABLE_RAMDISK).
const (
	minorRebuildConfigDrive  = 35
	minorBuildConfigDrive    = 56
	minorConfigDriveVendor   = 59
	minorCleanDisableRamdisk = 70
	minorServiceDisableRd    = 108
)

func invalid(format string, a ...any) error {
	return &engine.Error{Kind: engine.Invalid, Msg: fmt.Sprintf(format, a...)}
}

// provisionExtras checks a provision request's configdrive and
// disable_ramdisk as Ironic's API does (check_allow_configdrive,
// check_allow_disable_ramdisk) and puts the config drive, built when it
// is the JSON form, into req. Nothing here logs the config drive.
func (s *Server) provisionExtras(r *http.Request, req *fsm.VerbRequest, cd json.RawMessage, disableRamdisk *bool) error {
	minor := apiMinor(r)
	if disableRamdisk != nil {
		switch req.Verb {
		case fsm.Clean:
			if minor < minorCleanDisableRamdisk {
				return tooNew("disable_ramdisk", minorCleanDisableRamdisk, minor)
			}
		case fsm.Service:
			if minor < minorServiceDisableRd {
				return tooNew("disable_ramdisk with service", minorServiceDisableRd, minor)
			}
			// A service of out-of-band steps boots no ramdisk here.
			if *disableRamdisk {
				if err := s.checkNoRamdisk(r.PathValue("id"), req.ServiceSteps); err != nil {
					return err
				}
			}
		default:
			// Ironic's words.
			return invalid("disable_ramdisk is supported only with manual cleaning or servicing")
		}
		if *disableRamdisk && req.Verb == fsm.Clean {
			if err := s.checkNoRamdisk(r.PathValue("id"), req.CleanSteps); err != nil {
				return err
			}
		}
	}
	if configdrive.Empty(cd) {
		return nil
	}
	if req.Verb != fsm.Deploy && !(req.Verb == fsm.Rebuild && minor >= minorRebuildConfigDrive) {
		targets := "active"
		if minor >= minorRebuildConfigDrive {
			targets += ", rebuild"
		}
		return invalid("Adding a config drive is only supported when setting provision state to %s", targets)
	}
	p, err := configdrive.Parse(cd, minor >= minorBuildConfigDrive, minor >= minorConfigDriveVendor)
	var ce *configdrive.Error
	if errors.As(err, &ce) {
		return invalid("%s", ce.Msg)
	}
	if err != nil {
		return err
	}
	if p == nil {
		return nil
	}
	if p.Kind != configdrive.KindJSON {
		req.ConfigDrive = p.Value
		return nil
	}
	var node configdrive.Node
	err = s.e.View(r.PathValue("id"), func(n *fsm.Node, _ bool) error {
		node = configdrive.Node{UUID: n.UUID, Name: n.Name, NetworkData: n.NetworkData}
		return nil
	})
	if err != nil {
		return err
	}
	if node.Bonds, err = s.bonds(node.UUID); err != nil {
		return err
	}
	enc, err := configdrive.Build(p.Spec, node)
	if errors.As(err, &ce) {
		return invalid("%s", ce.Msg)
	}
	if err != nil {
		return invalid("Cannot build the config drive: %v", err)
	}
	req.ConfigDrive = enc
	return nil
}

// checkNoRamdisk refuses a manual clean with disable_ramdisk that has a
// step needing the ramdisk (Ironic's "requires booting a ramdisk"): only
// the driver's out-of-band steps run without it. A clean of out-of-band
// steps never boots the ramdisk here, so disable_ramdisk is honoured.
func (s *Server) checkNoRamdisk(id string, steps []map[string]any) error {
	return s.e.View(id, func(n *fsm.Node, _ bool) error {
		d, err := s.e.Machine().Config().Drivers.Get(n.Driver)
		if err != nil {
			return invalid("%v", err)
		}
		d = d.ForRAIDInterface(n.RaidInterface)
		for i, st := range steps {
			iface, _ := st["interface"].(string)
			name, _ := st["step"].(string)
			if decl, ok := drivers.Find(d.CleanSteps, iface, name); ok && !decl.RequiresRamdisk {
				continue
			}
			return invalid("clean step %d (%s.%s) requires booting a ramdisk, and disable_ramdisk is set; with disable_ramdisk only the out-of-band clean steps of driver %s can run; leave disable_ramdisk out to let node %s boot its ramdisk",
				i+1, iface, name, n.Driver, n.Ident())
		}
		return nil
	})
}

// bonds are a node's port groups with their ports' MAC addresses, for the
// config drive's network_data.
func (s *Server) bonds(node string) ([]configdrive.Bond, error) {
	groups, err := s.e.PortGroups(node)
	if err != nil || len(groups) == 0 {
		return nil, err
	}
	ports, err := s.e.Ports(node)
	if err != nil {
		return nil, err
	}
	var out []configdrive.Bond
	for _, g := range groups {
		b := configdrive.Bond{Name: g.Name, Mode: g.Mode, Address: g.Address, Properties: g.Properties}
		if b.Mode == "" {
			b.Mode = engine.DefaultBondMode
		}
		for _, p := range ports {
			if p.PortGroupUUID == g.UUID {
				b.Ports = append(b.Ports, p.Address)
			}
		}
		out = append(out, b)
	}
	return out, nil
}
