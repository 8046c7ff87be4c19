package fsm

import (
	"errors"
	"maps"

	"github.com/bmedge/bmedge/drivers"
)

// burninNetworkArgs completes deploy.burnin_network's args when it is
// sent: the arguments are checked again (driver_info may have changed
// since the clean was asked), the partner node is resolved and the pair's
// key added (drivers.ArgBurninNetworkPair). The key goes only into the
// command to the node's ramdisk: clean_step shows the operator's args.
func (m *Machine) burninNetworkArgs(n *Node, args map[string]any) (map[string]any, error) {
	nb, err := drivers.NetworkBurninArgs(args)
	if err != nil {
		return nil, err
	}
	if m.cfg.BurninPair == nil {
		return nil, errors.New("this coordinator cannot pair nodes for a network burn-in")
	}
	partner, secret, err := m.cfg.BurninPair(n, nb.PartnerNode)
	if err != nil {
		return nil, err
	}
	out := maps.Clone(args)
	out[drivers.ArgBurninNetworkPair] = map[string]any{"node": n.UUID, "partner_node": partner, "secret": secret}
	return out, nil
}
