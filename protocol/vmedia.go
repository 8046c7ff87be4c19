package protocol

import (
	"fmt"
	"slices"
)

// ActionVMedia asks the edge agent to attach or detach virtual media of a
// node's BMC for the operator (Ironic's API 1.89 vmedia: Metal3's
// dataImage), outside the ramdisk's own boot media: VMediaArgs. Its
// result's data carries the BMC's devices as read after the change
// (DataVirtualMedia).
const ActionVMedia = "vmedia"

// Virtual media operations and device types (Ironic's VMEDIA_DEVICES).
const (
	VMediaAttach = "attach"
	VMediaDetach = "detach"

	VMediaCDROM  = "cdrom"
	VMediaDisk   = "disk"
	VMediaFloppy = "floppy"
)

// VMediaDeviceTypes are the device types, in Ironic's order.
func VMediaDeviceTypes() []string { return []string{VMediaDisk, VMediaCDROM, VMediaFloppy} }

// DataVirtualMedia, in a vmedia command's result data, lists the BMC's
// virtual media devices after the change, in Ironic's GET shape: each
// {"media_types": [...], "inserted": bool, "image": URL}; an image the
// operator attached shows the URL the operator gave (without its user
// information and query, which may hold credentials), any other image
// only its scheme and host (the site's URLs carry access tokens).
const DataVirtualMedia = "virtual_media"

// VMediaArgs is a vmedia command's payload.
type VMediaArgs struct {
	// Op is VMediaAttach or VMediaDetach.
	Op string
	// DeviceType and ImageURL: the attach's device and image (http or
	// https, which the edge agent fetches into its image cache under its
	// fetch rule; the BMC reads the cache's copy).
	DeviceType, ImageURL string
	// DeviceTypes: the detach's devices (none: all of them).
	DeviceTypes []string
}

const (
	argVMediaOp      = "op"
	argVMediaDevice  = "device_type"
	argVMediaImage   = "image_url"
	argVMediaDevices = "device_types"
)

// VMediaArgsOf reads a vmedia command's args.
func VMediaArgsOf(args map[string]any) VMediaArgs {
	var v VMediaArgs
	v.Op, _ = args[argVMediaOp].(string)
	v.DeviceType, _ = args[argVMediaDevice].(string)
	v.ImageURL, _ = args[argVMediaImage].(string)
	switch l := args[argVMediaDevices].(type) {
	case []string:
		v.DeviceTypes = slices.Clone(l)
	case []any:
		for _, x := range l {
			if s, ok := x.(string); ok {
				v.DeviceTypes = append(v.DeviceTypes, s)
			}
		}
	}
	return v
}

// Args is the payload in its wire form.
func (v VMediaArgs) Args() map[string]any {
	a := map[string]any{argVMediaOp: v.Op}
	if v.DeviceType != "" {
		a[argVMediaDevice] = v.DeviceType
	}
	if v.ImageURL != "" {
		a[argVMediaImage] = v.ImageURL
	}
	if len(v.DeviceTypes) > 0 {
		l := make([]any, len(v.DeviceTypes))
		for i, d := range v.DeviceTypes {
			l[i] = d
		}
		a[argVMediaDevices] = l
	}
	return a
}

func checkVMedia(m *Message) error {
	v := VMediaArgsOf(m.Args)
	switch v.Op {
	case VMediaAttach:
		if !slices.Contains(VMediaDeviceTypes(), v.DeviceType) {
			return fmt.Errorf("vmedia command %q attaches device type %q; want one of %v", m.ID, v.DeviceType, VMediaDeviceTypes())
		}
		if v.ImageURL == "" || len(v.ImageURL) > MaxISOURLBytes {
			return fmt.Errorf("vmedia command %q needs %s, an http(s) URL of at most %d bytes", m.ID, argVMediaImage, MaxISOURLBytes)
		}
	case VMediaDetach:
		for _, d := range v.DeviceTypes {
			if !slices.Contains(VMediaDeviceTypes(), d) {
				return fmt.Errorf("vmedia command %q detaches device type %q; want one of %v", m.ID, d, VMediaDeviceTypes())
			}
		}
	default:
		return fmt.Errorf("vmedia command %q has op %q; want %q or %q", m.ID, v.Op, VMediaAttach, VMediaDetach)
	}
	return nil
}
