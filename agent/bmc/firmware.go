package bmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// Firmware updates and the firmware and BIOS readings that go back to
// the coordinator in a command's result data (protocol.DataFirmware,
// protocol.DataBIOS), as Ironic caches them: at manage (after the BMC
// answered), after every firmware.update and after the BIOS steps.
//
// firmware.update never hands the BMC the image's origin URL: every
// image is first fetched into the site's image cache (one WAN transfer
// per site, shared by every node that names the same URL and checksum)
// and its checksum verified there, before the BMC is asked anything;
// the BMC then fetches it from the cache under a token URL. An image
// without a checksum, or a site without an image cache, is refused.

// dataKey is the context key of a command's result data.
type dataKey struct{}

// resultData collects what a command's run leaves for its result.
type resultData struct {
	mu sync.Mutex
	m  map[string]any
}

// WithData returns a context under which a BMC command's run may leave
// result data, and the function that returns it (nil when none was left).
// The command's warnings (drivers.Warn) are in it under
// protocol.DataWarnings.
func WithData(ctx context.Context) (context.Context, func() map[string]any) {
	d := &resultData{}
	ctx, warnings := drivers.WithWarnings(ctx)
	return context.WithValue(ctx, dataKey{}, d), func() map[string]any {
		d.mu.Lock()
		defer d.mu.Unlock()
		w := warnings()
		if len(d.m) == 0 && len(w) == 0 {
			return nil
		}
		out := make(map[string]any, len(d.m)+1)
		for k, v := range d.m {
			out[k] = v
		}
		if len(w) > 0 {
			list := make([]any, len(w))
			for i, x := range w {
				list[i] = x
			}
			out[protocol.DataWarnings] = list
		}
		return out
	}
}

// putData leaves v under key in the command's result data, as JSON
// values (the result goes through the outbox as JSON anyway).
func putData(ctx context.Context, key string, v any) {
	d, _ := ctx.Value(dataKey{}).(*resultData)
	if d == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	var j any
	if json.Unmarshal(b, &j) != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]any{}
	}
	d.m[key] = j
}

// clip bounds a string the BMC gave.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// boundFirmware bounds a firmware reading for the result.
func boundFirmware(comps []drivers.FirmwareComponent) []drivers.FirmwareComponent {
	if len(comps) > protocol.MaxFirmwareComponents {
		comps = comps[:protocol.MaxFirmwareComponents]
	}
	out := make([]drivers.FirmwareComponent, 0, len(comps))
	for _, c := range comps {
		out = append(out, drivers.FirmwareComponent{Component: clip(c.Component, 255), Version: clip(c.Version, 255)})
	}
	return out
}

// boundBIOS bounds a BIOS reading for the result: at most
// MaxBIOSSettings settings; past MaxBIOSBytes the registry fields are
// left out, and past it again nothing is reported (nil).
func boundBIOS(settings []drivers.BIOSSetting) []drivers.BIOSSetting {
	if len(settings) > protocol.MaxBIOSSettings {
		settings = settings[:protocol.MaxBIOSSettings]
	}
	out := make([]drivers.BIOSSetting, 0, len(settings))
	for _, s := range settings {
		s.Name = clip(s.Name, 255)
		if v, ok := s.Value.(string); ok {
			s.Value = clip(v, 4096)
		}
		out = append(out, s)
	}
	if b, _ := json.Marshal(out); len(b) <= protocol.MaxBIOSBytes {
		return out
	}
	for i := range out {
		out[i] = drivers.BIOSSetting{Name: out[i].Name, Value: out[i].Value}
	}
	if b, _ := json.Marshal(out); len(b) <= protocol.MaxBIOSBytes {
		return out
	}
	return nil
}

// readHardware leaves both readings in the result data: at manage
// (validate) and at inspection (its boot command asks for it).
func (set *Set) readHardware(ctx context.Context, node string, b drivers.BMC) {
	set.readFirmware(ctx, node, b)
	set.readBIOS(ctx, node, b)
}

// readFirmware leaves the BMC's firmware versions in the result data,
// when its driver reads them; a failure is logged, not fatal (Ironic
// caches what it can).
func (set *Set) readFirmware(ctx context.Context, node string, b drivers.BMC) {
	fb, ok := b.(drivers.FirmwareBMC)
	if !ok {
		return
	}
	var comps []drivers.FirmwareComponent
	var err error
	if pr, ok := b.(interface {
		FirmwareReading(context.Context) ([]drivers.FirmwareComponent, []string, error)
	}); ok {
		// A reading that lost a part (a manager or an inventory member
		// the BMC did not serve) says so: to the node's history.
		var warns []string
		comps, warns, err = pr.FirmwareReading(ctx)
		for _, w := range warns {
			drivers.Warn(ctx, "firmware reading: "+w)
		}
	} else {
		comps, err = fb.FirmwareComponents(ctx)
	}
	if err != nil {
		set.log.Warn("reading the firmware versions failed; the node's firmware list is not updated", "node", node, "err", err)
		drivers.Warn(ctx, "the firmware versions could not be read; the node's firmware list is not updated: "+err.Error())
		return
	}
	putData(ctx, protocol.DataFirmware, boundFirmware(comps))
}

// readBIOS leaves the BMC's BIOS settings in the result data, when its
// driver reads them; a failure is logged, not fatal.
func (set *Set) readBIOS(ctx context.Context, node string, b drivers.BMC) {
	br, ok := b.(drivers.BIOSReader)
	if !ok {
		return
	}
	var settings []drivers.BIOSSetting
	var err error
	if pr, ok := b.(interface {
		BIOSReading(context.Context) ([]drivers.BIOSSetting, []string, error)
	}); ok {
		var warns []string
		settings, warns, err = pr.BIOSReading(ctx)
		for _, w := range warns {
			drivers.Warn(ctx, "BIOS reading: "+w)
		}
	} else {
		settings, err = br.BIOSSettings(ctx)
	}
	if err != nil {
		set.log.Warn("reading the BIOS settings failed; the node's BIOS settings are not updated", "node", node, "err", err)
		drivers.Warn(ctx, "the BIOS settings could not be read; the node's BIOS settings are not updated: "+err.Error())
		return
	}
	bounded := boundBIOS(settings)
	if bounded == nil && len(settings) > 0 {
		set.log.Warn("the BIOS settings are too large to report; the node's BIOS settings are not updated", "node", node, "settings", len(settings))
		drivers.Warn(ctx, fmt.Sprintf("the BMC's %d BIOS settings are too large to report; the node's BIOS settings are not updated", len(settings)))
		return
	}
	putData(ctx, protocol.DataBIOS, bounded)
}

// redactedURL is an image URL fit for a message: no credentials, no query.
func redactedURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(an image URL that does not parse)"
	}
	u.RawQuery = ""
	return u.Redacted()
}

// updateFirmware runs firmware.update: every image into the site cache
// and verified first, then the driver's update from the cache's URLs,
// then the versions read back into the result data.
func (set *Set) updateFirmware(ctx context.Context, node string, b drivers.BMC, args map[string]any) error {
	fb, ok := b.(drivers.FirmwareBMC)
	if !ok {
		return errors.New("this node's BMC driver cannot update firmware")
	}
	updates, err := drivers.ParseFirmwareSettings(args["settings"])
	if err != nil {
		return err
	}
	if set.cfg.BlobURL == nil {
		return fmt.Errorf("the edge agent of site %s has no image cache (start it with --image-cache-dir and --image-cache-listen): firmware images reach the BMCs only through it, checksum verified", set.cfg.Site)
	}
	// The cache's URLs carry tokens: errors name the origin (redacted).
	names := map[string]string{}
	for i := range updates {
		u := &updates[i]
		if u.Checksum == "" {
			return fmt.Errorf("step firmware.update: settings[%d] (%s) has no checksum; the edge agent verifies every image before the BMC sees it: give checksum as sha256:<hex> (or sha512, md5)", i, u.Component)
		}
		local, err := set.cfg.BlobURL(ctx, u.URL, u.Checksum)
		if err != nil {
			return fmt.Errorf("step firmware.update: settings[%d] (%s): the image %s was not given to the BMC: %v", i, u.Component, redactedURL(u.URL), err)
		}
		names[local] = redactedURL(u.URL)
		u.URL = local
	}
	comps, err := fb.UpdateFirmware(ctx, updates)
	if err != nil {
		msg := err.Error()
		for local, origin := range names {
			msg = strings.ReplaceAll(msg, local, origin)
			msg = strings.ReplaceAll(msg, redactedURL(local), origin)
		}
		return errors.New(msg)
	}
	putData(ctx, protocol.DataFirmware, boundFirmware(comps))
	return nil
}
