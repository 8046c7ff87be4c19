package engine

import (
	"fmt"
	"maps"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/drivers"
)

// The network burn-in (deploy.burnin_network) pairs two nodes of a site.
// The engine checks the pairing when the clean is asked (a 400 naming
// the field) and, when the step is sent, gives both ramdisks the pair's
// key: an HMAC of the engine's secret over "burnin_network" and the two
// node UUIDs sorted, so that both nodes of a pair, and only they, get
// the same key, and nothing of it is stored but the command to the node.

// burninPartner resolves n's partner_node: a node of this coordinator,
// in n's site, not n.
func (e *Engine) burninPartner(n *fsm.Node, ident string) (*fsm.Node, error) {
	p, err := e.lookup(ident)
	if err != nil {
		return nil, fmt.Errorf("%s: partner_node %q is no node of this coordinator; give the name or UUID of the partner node (in site %s)",
			drivers.ArgBurninNetworkConfig, ident, n.Site)
	}
	if p.UUID == n.UUID {
		return nil, fmt.Errorf("%s: partner_node %q is node %s itself; give the other node of the pair", drivers.ArgBurninNetworkConfig, ident, n.Ident())
	}
	if p.Site != n.Site {
		return nil, fmt.Errorf("%s: partner_node %q is in site %s, node %s in site %s; pair two nodes of one site",
			drivers.ArgBurninNetworkConfig, ident, p.Site, n.Ident(), n.Site)
	}
	return p, nil
}

// burninPair is fsm.Config.BurninPair.
func (e *Engine) burninPair(n *fsm.Node, partnerNode string) (string, string, error) {
	p, err := e.burninPartner(n, partnerNode)
	if err != nil {
		return "", "", err
	}
	a, b := n.UUID, p.UUID
	if b < a {
		a, b = b, a
	}
	return p.UUID, e.auth.Derive("burnin_network:" + a + ":" + b), nil
}

// checkBurninNetwork refuses a clean list whose deploy.burnin_network has
// a bad pairing, with its arguments as the step will get them (the
// step's args, completed from the node's driver_info).
func (e *Engine) checkBurninNetwork(n *fsm.Node, steps []map[string]any) error {
	std, _ := drivers.Standard("deploy", "burnin_network")
	for i, raw := range steps {
		if iface, _ := raw["interface"].(string); iface != "deploy" {
			continue
		}
		if name, _ := raw["step"].(string); name != "burnin_network" {
			continue
		}
		args, _ := raw["args"].(map[string]any)
		args = maps.Clone(args)
		if args == nil {
			args = map[string]any{}
		}
		for k := range std.ArgsInfo {
			if _, set := args[k]; !set {
				if v, ok := n.DriverInfo[k]; ok {
					args[k] = v
				}
			}
		}
		nb, err := drivers.NetworkBurninArgs(args)
		if err == nil {
			_, err = e.burninPartner(n, nb.PartnerNode)
		}
		if err != nil {
			return errorf(Invalid, "Invalid clean step %d (deploy.burnin_network) for node %s: %v", i+1, n.Ident(), err)
		}
	}
	return nil
}
