package bmc

import (
	"context"
	"fmt"
	"net/url"
	"slices"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/lib/imagechecksum"
	"github.com/bmedge/bmedge/protocol"
)

// This file runs the operator's virtual media commands (protocol
// ActionVMedia, Ironic's API 1.89 vmedia, Metal3's dataImage): the image
// is fetched into the site's image cache under its fetch rule and the
// BMC inserts the cache's copy; the BMC's devices are read back into the
// result (protocol.DataVirtualMedia).

// vmediaKind is the BMC's device of an Ironic device type: cdrom the
// virtual CD, disk and floppy the removable disk (USB stick or floppy,
// whichever the BMC offers).
func vmediaKind(deviceType string) string {
	if deviceType == protocol.VMediaCDROM {
		return drivers.MediaKindCD
	}
	return drivers.MediaKindUSB
}

// attached is what the operator attached to a node's device of a kind:
// the cache's URL the BMC holds and the URL the operator gave.
type attached struct{ local, src string }

func (s *Set) vmedia(ctx context.Context, m *protocol.Message, b drivers.BMC) error {
	mb, ok := b.(drivers.MediaBMC)
	if !ok {
		return fmt.Errorf("the BMC of node %s (driver %s) has no virtual media; attaching an image needs a Redfish BMC with virtual media", m.Node, m.Driver)
	}
	v := protocol.VMediaArgsOf(m.Args)
	switch v.Op {
	case protocol.VMediaAttach:
		if s.cfg.MediaURL == nil {
			return fmt.Errorf("the edge agent of site %s has no image cache (start it with --image-cache-dir and --image-cache-listen): a virtual media image reaches the BMCs only through it", s.cfg.Site)
		}
		local, err := s.cfg.MediaURL(ctx, v.ImageURL)
		if err != nil {
			return fmt.Errorf("image_url: %w", err)
		}
		kind := vmediaKind(v.DeviceType)
		if err := mb.InsertMedia(ctx, kind, local); err != nil {
			return fmt.Errorf("attach %s: %w", v.DeviceType, err)
		}
		s.mu.Lock()
		if s.media[m.Node] == nil {
			s.media[m.Node] = map[string]attached{}
		}
		s.media[m.Node][kind] = attached{local: local, src: v.ImageURL}
		s.mu.Unlock()
	case protocol.VMediaDetach:
		types := v.DeviceTypes
		if len(types) == 0 {
			types = protocol.VMediaDeviceTypes()
		}
		var kinds []string
		for _, d := range types {
			if k := vmediaKind(d); !slices.Contains(kinds, k) {
				kinds = append(kinds, k)
			}
		}
		for _, k := range kinds {
			if err := mb.EjectMedia(ctx, k); err != nil {
				return fmt.Errorf("detach the %s: %w", k, err)
			}
			s.mu.Lock()
			delete(s.media[m.Node], k)
			s.mu.Unlock()
		}
	default:
		return fmt.Errorf("vmedia command with op %q", v.Op)
	}
	devs, err := mb.ListMedia(ctx)
	if err != nil {
		drivers.Warn(ctx, fmt.Sprintf("the virtual media were changed but could not be read back: %v", err))
		return nil
	}
	putData(ctx, protocol.DataVirtualMedia, s.shownMedia(m.Node, devs))
	return nil
}

// shownMedia is the BMC's devices in Ironic's GET shape. The image of a
// device the operator attached is the URL the operator gave, without its
// user information and query; any other
// (the ramdisk's media, another tool's) shows its scheme and host only:
// the site's media URLs carry access tokens.
func (s *Set) shownMedia(node string, devs []drivers.MediaDevice) []map[string]any {
	s.mu.Lock()
	mine := s.media[node]
	s.mu.Unlock()
	out := []map[string]any{}
	for _, d := range devs {
		image := d.Image
		if image != "" {
			known := false
			for _, a := range mine {
				if a.local == image {
					// Its credentials and query (a signature) left out.
					image, known = imagechecksum.RedactURL(a.src), true
					break
				}
			}
			if !known {
				image = hostOnly(image)
			}
		}
		types := d.MediaTypes
		if types == nil {
			types = []string{}
		}
		out = append(out, map[string]any{"media_types": types, "inserted": d.Inserted, "image": image})
	}
	return out
}

// hostOnly is a URL's scheme and host, its path left out.
func hostOnly(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(not shown)"
	}
	return u.Scheme + "://" + u.Host + "/..."
}
