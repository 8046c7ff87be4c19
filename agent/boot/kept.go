package boot

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// KeptStore keeps what the boot part must remember of each node's
// virtual-media boot across an agent restart, in the agent's encrypted
// state folder (agent/outbox's Store).
type KeptStore interface {
	// PutVMedia writes a node's state (nil: removes it) and waits until
	// it is on disk.
	PutVMedia(node string, state []byte)
	// LoadVMedia returns the states kept, by node.
	LoadVMedia() (map[string][]byte, error)
}

// vmKept is a node's virtual-media boot as kept in the state folder: a
// record means the node boots the ramdisk from virtual media (its CD and
// USB stick are ejected when the boot ends: a power-off, or boot device
// disk); Token, Params and Created are its parameters image while the
// media server serves it (the image is made again from Params, which
// holds the boot's credential: the state folder is encrypted).
type vmKept struct {
	Token   string    `json:"token,omitempty"`
	Params  string    `json:"params,omitempty"`
	Created time.Time `json:"created,omitzero"`
	// ISO: the image is a UEFI HTTP boot's ISO (redfish-https), made
	// again from the ramdisk ISO and Params.
	ISO bool `json:"iso,omitempty"`
	// Ended: the boot is over (it failed, or the coordinator ended it);
	// the media may still be inserted and are ejected at the next
	// power-off or boot device disk, but no power-on boots them again.
	Ended bool `json:"ended,omitempty"`
}

// vmMode is what a node's virtual-media boot still is (Boot.vmBoot).
type vmMode int

const (
	// vmWanted: the node's next power-on boots the ramdisk from virtual
	// media (boot device pxe); its media may be inserted already.
	vmWanted vmMode = iota + 1
	// vmOwed: the boot is over, its media may still be inserted: only
	// their eject is owed.
	vmOwed
)

// Keep loads the virtual-media boots kept in st and keeps each change in
// it from now on, so that a restarted agent ends a boot under way as the
// one that began it would: its power-off (or boot device disk) ejects
// the media and the parameters image is served only until then. Call it
// before Start (which serves the kept parameters images again).
func (p *Boot) Keep(st KeptStore) error {
	kept, err := st.LoadVMedia()
	if err != nil {
		return fmt.Errorf("read the virtual-media boots in the state folder: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.kept = st
	p.restore = map[string]vmKept{}
	for node, b := range kept {
		var k vmKept
		if err := json.Unmarshal(b, &k); err != nil {
			// Still a virtual-media boot: its media are ejected at its
			// end (an eject of nothing is harmless).
			p.log.Warn("a node's virtual-media boot in the state folder is unreadable; its media are still ejected when the boot ends", "node", node, "err", err)
			k = vmKept{}
		}
		p.vmBoot[node] = vmWanted
		if k.Ended {
			p.vmBoot[node] = vmOwed
		}
		p.restore[node] = k
	}
	if len(kept) > 0 {
		p.log.Info("virtual-media boots loaded from the state folder: their media are ejected when each boot ends", "nodes", len(kept))
	}
	return nil
}

// keepVM writes a node's virtual-media boot to the state folder (nil:
// removes it); without Keep, nothing.
func (p *Boot) keepVM(node string, k *vmKept) {
	p.mu.Lock()
	st := p.kept
	p.mu.Unlock()
	if st == nil {
		return
	}
	if k == nil {
		st.PutVMedia(node, nil)
		return
	}
	b, err := json.Marshal(k)
	if err != nil {
		return // a struct of strings and a time: never
	}
	st.PutVMedia(node, b)
}

// restoreParams serves again the parameters images of the boots kept in
// the state folder whose time (paramsTTL) is not over; the others are
// dropped from it. Start calls it once the media server is up.
func (p *Boot) restoreParams() {
	p.mu.Lock()
	restore := p.restore
	p.restore = nil
	p.mu.Unlock()
	now := p.cfg.Clock.Now()
	for node, k := range restore {
		if k.Token == "" {
			continue
		}
		if p.media != nil && now.Sub(k.Created) <= paramsTTL {
			restore := func() error { return p.media.restoreParams(node, k.Token, k.Params, k.Created) }
			if k.ISO {
				restore = func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					return p.media.restoreHTTPBoot(ctx, node, k.Token, k.Params, k.Created)
				}
			}
			if err := restore(); err == nil {
				continue
			}
			p.log.Warn("a kept boot's parameters image could not be made again; it is no longer served", "node", node)
		}
		p.keepVM(node, &vmKept{Ended: k.Ended})
	}
}
