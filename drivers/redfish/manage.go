package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/schemas"

	"github.com/bmedge/bmedge/drivers"

	"github.com/bmedge/bmedge/protocol"
)

// Boot devices: the interface's pxe and disk, and beyond it the CD (the
// virtual media) and the firmware's setup.
const (
	BootPXE   = protocol.BootPXE
	BootDisk  = protocol.BootDisk
	BootCDROM = "cdrom"
	BootBIOS  = "bios"
)

// Boot modes.
const (
	ModeUEFI = "uefi"
	ModeBIOS = "bios"
)

var bootTargets = map[string]schemas.BootSource{
	BootPXE:   schemas.PxeBootSource,
	BootDisk:  schemas.HddBootSource,
	BootCDROM: schemas.CdBootSource,
	BootBIOS:  schemas.BiosSetupBootSource,
}

var bootModes = map[string]schemas.BootSourceOverrideMode{
	ModeUEFI: schemas.UEFIBootSourceOverrideMode,
	ModeBIOS: schemas.LegacyBootSourceOverrideMode,
}

// BootSettings is the boot override as the BMC reports it.
type BootSettings struct {
	// Device is pxe, disk, cdrom or bios; "" when no override is set.
	Device string
	// Persistent is true for a Continuous override, false for Once.
	Persistent bool
	// Mode is uefi or bios ("" when the BMC does not say).
	Mode string
}

func bootSettings(sys *schemas.ComputerSystem) BootSettings {
	var s BootSettings
	if sys.Boot.BootSourceOverrideEnabled != schemas.DisabledBootSourceOverrideEnabled {
		for dev, t := range bootTargets {
			if sys.Boot.BootSourceOverrideTarget == t {
				s.Device = dev
			}
		}
		s.Persistent = sys.Boot.BootSourceOverrideEnabled == schemas.ContinuousBootSourceOverrideEnabled
	}
	for m, v := range bootModes {
		if sys.Boot.BootSourceOverrideMode == v {
			s.Mode = m
		}
	}
	return s
}

// SetBootDevice implements drivers.BMC: the device ("pxe" or "disk") for
// every boot from now on, as Ironic's persistent boot device.
func (b *BMC) SetBootDevice(ctx context.Context, device string) error {
	if device != BootPXE && device != BootDisk {
		return fmt.Errorf("redfish driver: unknown boot device %q; want %q or %q", device, BootPXE, BootDisk)
	}
	return b.SetBoot(ctx, device, true)
}

// SetBoot sets the boot device (pxe, disk, cdrom or bios) for the next
// boot only or, persistent, for every boot, and reads it back: some BMCs
// accept a PATCH and ignore part of it.
func (b *BMC) SetBoot(ctx context.Context, device string, persistent bool) error {
	target, ok := bootTargets[device]
	if !ok {
		return fmt.Errorf("redfish driver: unknown boot device %q; want pxe, disk, cdrom or bios", device)
	}
	enabled := schemas.OnceBootSourceOverrideEnabled
	if persistent {
		enabled = schemas.ContinuousBootSourceOverrideEnabled
	}
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	what := fmt.Sprintf("set the boot device to %s (%s)", device, enabled)
	var got BootSettings
	err := b.do(ctx, what, func(c *gofish.APIClient) error {
		sys, err := b.getSystem(c)
		if err != nil {
			return err
		}
		if allowed := sys.Boot.AllowableBootSourceOverrideTargetValues; len(allowed) > 0 && !containsSource(allowed, target) {
			return fmt.Errorf("the BMC does not offer boot target %s (it offers %v)", target, allowed)
		}
		if err := sys.SetBoot(&schemas.Boot{BootSourceOverrideTarget: target, BootSourceOverrideEnabled: enabled}); err != nil {
			return &reqError{"PATCH", sys.ODataID, err}
		}
		if sys, err = b.getSystem(c); err != nil {
			return err
		}
		got = bootSettings(sys)
		return nil
	})
	if err != nil {
		return err
	}
	if got.Device != device || got.Persistent != persistent {
		return fmt.Errorf("redfish BMC %s accepted boot device %s (%s) but reports %+v; the BMC may not support this override", b.cfg.endpoint, device, enabled, got)
	}
	b.log.Info("redfish boot device set", "device", device, "persistent", persistent)
	return nil
}

func containsSource(list []schemas.BootSource, s schemas.BootSource) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// SetBootMode sets the boot mode (uefi or bios) and reads it back.
func (b *BMC) SetBootMode(ctx context.Context, mode string) error {
	m, ok := bootModes[mode]
	if !ok {
		return fmt.Errorf("redfish driver: unknown boot mode %q; want uefi or bios", mode)
	}
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	var got BootSettings
	err := b.do(ctx, "set the boot mode to "+mode, func(c *gofish.APIClient) error {
		sys, err := b.getSystem(c)
		if err != nil {
			return err
		}
		if err := sys.SetBoot(&schemas.Boot{BootSourceOverrideMode: m}); err != nil {
			return &reqError{"PATCH", sys.ODataID, err}
		}
		if sys, err = b.getSystem(c); err != nil {
			return err
		}
		got = bootSettings(sys)
		return nil
	})
	if err != nil {
		return err
	}
	if got.Mode != mode {
		return fmt.Errorf("redfish BMC %s accepted boot mode %s but reports %q", b.cfg.endpoint, mode, got.Mode)
	}
	return nil
}

// BootSettings reads the boot override back.
func (b *BMC) BootSettings(ctx context.Context) (BootSettings, error) {
	ctx, cancel := reserve(reading(ctx))
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return BootSettings{}, err
	}
	defer b.unlock()
	sys, err := b.readSystem(ctx, "read the boot settings")
	if err != nil {
		return BootSettings{}, err
	}
	return bootSettings(sys), nil
}

// Virtual media kinds: the CD the ramdisk ISO boots from, and the
// removable disk (USB stick or floppy, as BMCs call it) that carries a
// boot's own parameters beside it.
const (
	MediaCD  = drivers.MediaKindCD
	MediaUSB = drivers.MediaKindUSB
)

var mediaTypes = map[string][]schemas.VirtualMediaType{
	MediaCD:  {schemas.CDVirtualMediaType, schemas.DVDVirtualMediaType},
	MediaUSB: {schemas.USBStickVirtualMediaType, schemas.FloppyVirtualMediaType},
}

var mediaNames = map[string]string{MediaCD: "virtual CD", MediaUSB: "virtual USB stick or floppy"}

// mediaDoc is a VirtualMedia resource as the driver reads it itself:
// gofish keeps the actions' targets to itself and has no PATCH path.
type mediaDoc struct {
	ODataID        string   `json:"@odata.id"`
	ID             string   `json:"Id"`
	Name           string   `json:"Name"`
	MediaTypes     []string `json:"MediaTypes"`
	Image          *string  `json:"Image"`
	Inserted       *bool    `json:"Inserted"`
	WriteProtected *bool    `json:"WriteProtected"`
	Actions        struct {
		Insert *struct {
			Target string `json:"target"`
		} `json:"#VirtualMedia.InsertMedia"`
		Eject *struct {
			Target string `json:"target"`
		} `json:"#VirtualMedia.EjectMedia"`
	} `json:"Actions"`
}

func (m *mediaDoc) inserted() bool { return m.Inserted != nil && *m.Inserted }

func (m *mediaDoc) image() string {
	if m.Image == nil {
		return ""
	}
	return *m.Image
}

// noMediaError: the BMC has no virtual media device of the kind asked.
type noMediaError struct{ msg string }

func (e *noMediaError) Error() string { return e.msg }

// mediaMatch tells whether a device is of a kind: by its MediaTypes, or,
// when it lists none (AMI MegaRAC's CD1), by its Id and Name.
func mediaMatch(m *mediaDoc, kind string) bool {
	for _, t := range m.MediaTypes {
		for _, w := range mediaTypes[kind] {
			if t == string(w) {
				return true
			}
		}
	}
	if len(m.MediaTypes) > 0 {
		return false
	}
	name := strings.ToLower(m.ID + " " + m.Name)
	switch kind {
	case MediaCD:
		return strings.Contains(name, "cd") || strings.Contains(name, "dvd")
	case MediaUSB:
		return strings.Contains(name, "usb") || strings.Contains(name, "floppy") || strings.Contains(name, "removable")
	}
	return false
}

// findMedia finds the system's virtual media device of a kind: under the
// system itself (newer BMCs, DMTF's mockup) or under the managers that
// manage it (most BMCs, and where sushy looks).
func (b *BMC) findMedia(c *gofish.APIClient, kind string) (*mediaDoc, error) {
	if _, ok := mediaTypes[kind]; !ok {
		return nil, fmt.Errorf("unknown virtual media kind %q (want %s or %s)", kind, MediaCD, MediaUSB)
	}
	uri, err := b.findSystem(c)
	if err != nil {
		return nil, err
	}
	var sys struct {
		VirtualMedia link `json:"VirtualMedia"`
		Links        struct {
			ManagedBy []link `json:"ManagedBy"`
		} `json:"Links"`
	}
	if err := getJSON(c, uri, &sys); err != nil {
		return nil, err
	}
	var cols, looked []string
	if sys.VirtualMedia.ID != "" {
		cols = append(cols, sys.VirtualMedia.ID)
	}
	var notes []string
	if len(cols) == 0 {
		for _, m := range sys.Links.ManagedBy {
			var mgr struct {
				VirtualMedia link `json:"VirtualMedia"`
			}
			if err := getJSON(c, m.ID, &mgr); err != nil {
				if st := statusOf(err); st == http.StatusUnauthorized || st == http.StatusForbidden {
					return nil, err
				}
				notes = append(notes, fmt.Sprintf("manager %s: %s", m.ID, b.explain(err)))
				continue
			}
			if mgr.VirtualMedia.ID != "" {
				cols = append(cols, mgr.VirtualMedia.ID)
			} else {
				looked = append(looked, m.ID+" (no VirtualMedia)")
			}
		}
	}
	var seen []string
	var found *mediaDoc
	for _, col := range cols {
		looked = append(looked, col)
		docs, err := mediaMembers(c, col)
		if err != nil {
			return nil, err
		}
		for _, d := range docs {
			if found == nil && mediaMatch(d, kind) {
				found = d
			}
			seen = append(seen, fmt.Sprintf("%s %v", d.ODataID, d.MediaTypes))
		}
		if found != nil {
			return found, nil
		}
	}
	msg := fmt.Sprintf("the BMC offers no %s for %s (virtual media devices: %s; looked at %s)", mediaNames[kind], uri, orNone(seen), orNone(looked))
	if len(notes) > 0 {
		msg += "; " + strings.Join(notes, "; ")
	}
	return nil, &noMediaError{msg}
}

// mediaMembers reads the devices of a VirtualMedia collection.
func mediaMembers(c *gofish.APIClient, col string) ([]*mediaDoc, error) {
	var cd collectionDoc
	if err := getJSON(c, col, &cd); err != nil {
		return nil, err
	}
	docs := make([]*mediaDoc, len(cd.Members))
	errs := make([]error, len(cd.Members))
	var fns []func()
	for i, m := range cd.Members {
		fns = append(fns, func() {
			docs[i] = &mediaDoc{}
			errs[i] = getJSON(c, m.ID, docs[i])
		})
	}
	parallel(fns...)
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return docs, nil
}

// ListMedia reads the system's virtual media devices (Ironic's
// get_vmedia): those under the system, else those of the managers that
// manage it, as findMedia looks.
func (b *BMC) ListMedia(ctx context.Context) ([]drivers.MediaDevice, error) {
	ctx, cancel := reserve(reading(ctx))
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.unlock()
	var out []drivers.MediaDevice
	err := b.do(ctx, "read the virtual media", func(c *gofish.APIClient) error {
		out = nil
		uri, err := b.findSystem(c)
		if err != nil {
			return err
		}
		var sys struct {
			VirtualMedia link `json:"VirtualMedia"`
			Links        struct {
				ManagedBy []link `json:"ManagedBy"`
			} `json:"Links"`
		}
		if err := getJSON(c, uri, &sys); err != nil {
			return err
		}
		var cols []string
		if sys.VirtualMedia.ID != "" {
			cols = append(cols, sys.VirtualMedia.ID)
		} else {
			for _, m := range sys.Links.ManagedBy {
				var mgr struct {
					VirtualMedia link `json:"VirtualMedia"`
				}
				if err := getJSON(c, m.ID, &mgr); err != nil {
					return err
				}
				if mgr.VirtualMedia.ID != "" {
					cols = append(cols, mgr.VirtualMedia.ID)
				}
			}
		}
		for _, col := range cols {
			docs, err := mediaMembers(c, col)
			if err != nil {
				return err
			}
			for _, d := range docs {
				out = append(out, drivers.MediaDevice{MediaTypes: append([]string{}, d.MediaTypes...), Inserted: d.inserted(), Image: d.image()})
			}
		}
		return nil
	})
	return out, err
}

// InsertVirtualMedia attaches the image at imageURL to the system's
// virtual CD (InsertMedia of kind MediaCD).
func (b *BMC) InsertVirtualMedia(ctx context.Context, imageURL string) error {
	return b.InsertMedia(ctx, MediaCD, imageURL)
}

// InsertMedia attaches the image at imageURL (http or https, which the
// BMC fetches) to the system's virtual media device of a kind. An image
// already there is ejected first; the same image is left as it is unless
// fresh is set (per-boot contents behind the same name).
func (b *BMC) InsertMedia(ctx context.Context, kind, imageURL string) error {
	return b.insertMedia(ctx, kind, imageURL, false)
}

// ejectDoc ejects a device: its EjectMedia action, else a PATCH of
// Image null and Inserted false (the spec's other way, and sushy's).
func (b *BMC) ejectDoc(c *gofish.APIClient, vm *mediaDoc) error {
	if vm.Actions.Eject != nil && vm.Actions.Eject.Target != "" {
		return postJSON(c, vm.Actions.Eject.Target, map[string]any{})
	}
	err := patchJSON(c, vm.ODataID, map[string]any{"Image": nil, "Inserted": false})
	if err != nil {
		return &mediaRefused{fmt.Sprintf("its device %s offers no EjectMedia action and refused a PATCH of Image and Inserted: %s", vm.ODataID, b.explain(err))}
	}
	return nil
}

func (b *BMC) insertMedia(ctx context.Context, kind, imageURL string, fresh bool) error {
	u, err := url.Parse(imageURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("redfish driver: virtual media image %q must be an http or https URL the BMC can reach", imageURL)
	}
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	// The URL's path may hold an access token: logs and errors show only
	// scheme and host.
	shown := u.Scheme + "://" + u.Host + "/..."
	how := ""
	err = b.do(ctx, "insert virtual media "+shown+" into the "+mediaNames[kind], func(c *gofish.APIClient) error {
		vm, err := b.findMedia(c, kind)
		if err != nil {
			return err
		}
		if vm.inserted() && vm.image() == imageURL && !fresh {
			how = "already there"
			return nil
		}
		if vm.inserted() {
			b.log.Info("redfish ejecting the previous virtual media", "kind", kind, "device", vm.ODataID)
			if err := b.ejectDoc(c, vm); err != nil {
				return err
			}
		}
		if vm.Actions.Insert != nil && vm.Actions.Insert.Target != "" {
			// Only Image: the spec's defaults for Inserted and
			// WriteProtected are true, and some BMCs refuse the action
			// when they are sent (sushy learnt this on Supermicro X11).
			how = "InsertMedia"
			body := map[string]any{"Image": imageURL}
			err := postJSON(c, vm.Actions.Insert.Target, body)
			if err != nil && statusOf(err) == http.StatusBadRequest && strings.Contains(b.explain(err), "TransferProtocolType") {
				// Some BMCs want the protocol named (as sushy retries).
				body["TransferProtocolType"] = strings.ToUpper(u.Scheme)
				err = postJSON(c, vm.Actions.Insert.Target, body)
			}
			if err != nil {
				return err
			}
		} else {
			// No action: PATCH Image with Inserted (which several BMCs
			// and DMTF's mockup server need to mount it) and
			// WriteProtected.
			how = "PATCH"
			if err := patchJSON(c, vm.ODataID, map[string]any{"Image": imageURL, "Inserted": true, "WriteProtected": true}); err != nil {
				return &mediaRefused{fmt.Sprintf("its %s %s offers no InsertMedia action and refused a PATCH of Image and Inserted: %s", mediaNames[kind], vm.ODataID, b.explain(err))}
			}
		}
		var back mediaDoc
		if err := getJSON(c, vm.ODataID, &back); err != nil {
			return err
		}
		if !back.inserted() || back.image() != imageURL {
			return fmt.Errorf("the BMC accepted the image (%s) but its %s %s shows Inserted=%v, Image %q", how, mediaNames[kind], vm.ODataID, back.inserted(), redactURL(back.image()))
		}
		return nil
	})
	if err == nil {
		b.log.Info("redfish virtual media inserted", "kind", kind, "image", shown, "how", how)
	}
	return err
}

// mediaRefused: the BMC cannot mount media the ways this driver knows;
// not retried.
type mediaRefused struct{ msg string }

func (e *mediaRefused) Error() string { return e.msg }

// EjectVirtualMedia detaches the system's virtual CD, if it holds an image.
func (b *BMC) EjectVirtualMedia(ctx context.Context) error { return b.EjectMedia(ctx, MediaCD) }

// EjectMedia detaches the system's virtual media device of a kind, if it
// holds an image. A BMC without such a device has nothing to eject.
func (b *BMC) EjectMedia(ctx context.Context, kind string) error {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	return b.do(ctx, "eject the "+mediaNames[kind], func(c *gofish.APIClient) error {
		vm, err := b.findMedia(c, kind)
		var nm *noMediaError
		if errors.As(err, &nm) {
			return nil
		}
		if err != nil {
			return err
		}
		if !vm.inserted() {
			return nil
		}
		if err := b.ejectDoc(c, vm); err != nil {
			return err
		}
		var back mediaDoc
		if err := getJSON(c, vm.ODataID, &back); err != nil {
			return err
		}
		if back.inserted() {
			return fmt.Errorf("the BMC accepted the eject but its %s %s still shows Inserted=true", mediaNames[kind], vm.ODataID)
		}
		return nil
	})
}

// VirtualMedia reads the CD's image URL ("" when none is inserted).
func (b *BMC) VirtualMedia(ctx context.Context) (string, error) { return b.MediaImage(ctx, MediaCD) }

// MediaImage reads the image URL of the virtual media device of a kind
// ("" when none is inserted).
func (b *BMC) MediaImage(ctx context.Context, kind string) (string, error) {
	ctx, cancel := reserve(reading(ctx))
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return "", err
	}
	defer b.unlock()
	var image string
	err := b.do(ctx, "read the "+mediaNames[kind], func(c *gofish.APIClient) error {
		vm, err := b.findMedia(c, kind)
		if err == nil && vm.inserted() {
			image = vm.image()
		}
		return err
	})
	return image, err
}

// BootFromMedia prepares the next boot from virtual media: the ISO on the
// virtual CD, the boot's own parameters image on the virtual USB stick
// (always inserted afresh: its URL may be the same with new contents),
// and the CD as the boot device for the next boot only.
func (b *BMC) BootFromMedia(ctx context.Context, isoURL, paramsURL string) error {
	if err := b.InsertMedia(ctx, MediaCD, isoURL); err != nil {
		return err
	}
	if paramsURL != "" {
		if err := b.insertMedia(ctx, MediaUSB, paramsURL, true); err != nil {
			return err
		}
	}
	return b.SetBoot(ctx, BootCDROM, false)
}

// BootISO boots the system from a given ISO: the image at isoURL on the
// virtual CD and the CD as the persistent boot device (Ironic's redfish
// virtual media prepare_instance for the ramdisk deploy interface). The
// power is not changed.
func (b *BMC) BootISO(ctx context.Context, isoURL string) error {
	if err := b.InsertMedia(ctx, MediaCD, isoURL); err != nil {
		return err
	}
	return b.SetBoot(ctx, BootCDROM, true)
}

// EjectBootMedia ejects what BootFromMedia inserted.
func (b *BMC) EjectBootMedia(ctx context.Context) error {
	errCD := b.EjectMedia(ctx, MediaCD)
	errUSB := b.EjectMedia(ctx, MediaUSB)
	if errCD != nil {
		return errCD
	}
	return errUSB
}

// Setting is one BIOS attribute to set.
type Setting struct {
	Name  string
	Value any
}

// parseSettings reads bios.apply_configuration's settings argument: a
// list of {"name": ..., "value": ...}, as Ironic's.
func parseSettings(args map[string]any) ([]Setting, error) {
	const usage = `a list of {"name": ..., "value": ...}`
	raw, ok := args["settings"]
	if !ok || raw == nil {
		return nil, fmt.Errorf("step bios.apply_configuration: argument settings is required: %s", usage)
	}
	var items []any
	switch v := raw.(type) {
	case []any:
		items = v
	case []map[string]any:
		for _, m := range v {
			items = append(items, m)
		}
	case []Setting:
		for _, s := range v {
			items = append(items, map[string]any{"name": s.Name, "value": s.Value})
		}
	default:
		return nil, fmt.Errorf("step bios.apply_configuration: argument settings must be %s, not %T", usage, raw)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("step bios.apply_configuration: argument settings is empty; give %s", usage)
	}
	seen := map[string]bool{}
	var out []Setting
	for i, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("step bios.apply_configuration: settings[%d] must be an object {\"name\": ..., \"value\": ...}, not %T", i, it)
		}
		name, _ := m["name"].(string)
		if name == "" {
			return nil, fmt.Errorf("step bios.apply_configuration: settings[%d] has no name", i)
		}
		v, ok := m["value"]
		if !ok {
			return nil, fmt.Errorf("step bios.apply_configuration: settings[%d] (%s) has no value", i, name)
		}
		switch x := v.(type) {
		case string, bool, float64:
		case int:
			v = float64(x)
		case int64:
			v = float64(x)
		default:
			return nil, fmt.Errorf("step bios.apply_configuration: settings[%d] (%s) has a value of type %T; want a string, number or boolean", i, name, v)
		}
		for k := range m {
			if k != "name" && k != "value" {
				return nil, fmt.Errorf("step bios.apply_configuration: settings[%d] (%s) has an unknown key %q", i, name, k)
			}
		}
		if seen[name] {
			return nil, fmt.Errorf("step bios.apply_configuration: setting %s is given twice", name)
		}
		seen[name] = true
		out = append(out, Setting{Name: name, Value: v})
	}
	return out, nil
}

// biosDoc is the part of a Bios resource the driver reads itself: gofish
// keeps the settings object's address to itself.
type biosDoc struct {
	ID                string         `json:"@odata.id"`
	AttributeRegistry string         `json:"AttributeRegistry"`
	Attributes        map[string]any `json:"Attributes"`
	Settings          struct {
		SettingsObject link `json:"SettingsObject"`
	} `json:"@Redfish.Settings"`
	Actions struct {
		ResetBios *struct {
			Target string `json:"target"`
		} `json:"#Bios.ResetBios"`
	} `json:"Actions"`
}

// readBios reads the system's Bios resource; a system without one, or a
// Bios the BMC does not serve, is an error naming it.
func (b *BMC) readBios(c *gofish.APIClient) (*biosDoc, error) {
	uri, err := b.findSystem(c)
	if err != nil {
		return nil, err
	}
	var sys struct {
		Bios link `json:"Bios"`
	}
	if err := getJSON(c, uri, &sys); err != nil {
		return nil, err
	}
	if sys.Bios.ID == "" {
		return nil, fmt.Errorf("system %s links no Bios resource: the BMC offers no BIOS settings over Redfish", uri)
	}
	var doc biosDoc
	if err := getJSON(c, sys.Bios.ID, &doc); err != nil {
		return nil, err
	}
	if doc.ID == "" {
		doc.ID = sys.Bios.ID
	}
	return &doc, nil
}

// ApplyBIOSSettings stages BIOS settings on the BMC's pending settings
// resource; the firmware applies them at the next boot (a reboot of the
// node, which this does not do). Every name is checked against the
// attributes the BMC reports, and the pending values are read back.
func (b *BMC) ApplyBIOSSettings(ctx context.Context, settings []Setting) error {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	return b.do(ctx, "apply BIOS settings", func(c *gofish.APIClient) error {
		doc, err := b.readBios(c)
		if err != nil {
			return err
		}
		var unknown []string
		attrs := map[string]any{}
		for _, s := range settings {
			if _, ok := doc.Attributes[s.Name]; !ok {
				unknown = append(unknown, s.Name)
			}
			attrs[s.Name] = s.Value
		}
		if len(unknown) > 0 {
			var known []string
			for k := range doc.Attributes {
				known = append(known, k)
			}
			sort.Strings(known)
			return fmt.Errorf("the BIOS has no attribute %s (it has %s)", strings.Join(unknown, ", "), strings.Join(known, ", "))
		}
		target := doc.Settings.SettingsObject.ID
		if target == "" {
			// No separate pending resource: the BMC takes the PATCH on
			// the Bios resource itself.
			target = doc.ID
		}
		resp, err := c.Patch(target, map[string]any{"Attributes": attrs})
		if err != nil {
			return err
		}
		resp.Body.Close()
		var pending biosDoc
		if err := getJSON(c, target, &pending); err != nil {
			return err
		}
		var missing []string
		for _, s := range settings {
			if !sameValue(pending.Attributes[s.Name], s.Value) && !sameValue(doc.Attributes[s.Name], s.Value) {
				missing = append(missing, fmt.Sprintf("%s=%v (pending: %v)", s.Name, s.Value, pending.Attributes[s.Name]))
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("the BMC accepted the BIOS settings but does not show them pending: %s", strings.Join(missing, ", "))
		}
		b.log.Info("redfish BIOS settings pending until the next boot", "settings", len(settings), "resource", target)
		return nil
	})
}

func sameValue(a, b any) bool {
	if reflect.DeepEqual(a, b) {
		return true
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// BIOSAttributes reads the BIOS's current and pending attributes.
func (b *BMC) BIOSAttributes(ctx context.Context) (current, pending map[string]any, err error) {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer b.unlock()
	err = b.do(ctx, "read BIOS settings", func(c *gofish.APIClient) error {
		doc, err := b.readBios(c)
		if err != nil {
			return err
		}
		current = doc.Attributes
		pending = map[string]any{}
		if t := doc.Settings.SettingsObject.ID; t != "" {
			var p biosDoc
			if err := getJSON(c, t, &p); err != nil {
				return err
			}
			pending = p.Attributes
		}
		return nil
	})
	return current, pending, err
}

// FactoryResetBIOS asks for the BIOS defaults (Bios.ResetBios); like
// settings, they apply at the next boot.
func (b *BMC) FactoryResetBIOS(ctx context.Context) error {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	return b.do(ctx, "reset the BIOS to its defaults", func(c *gofish.APIClient) error {
		doc, err := b.readBios(c)
		if err != nil {
			return err
		}
		if doc.Actions.ResetBios == nil || doc.Actions.ResetBios.Target == "" {
			return fmt.Errorf("the Bios resource %s offers no ResetBios action", doc.ID)
		}
		return postJSON(c, doc.Actions.ResetBios.Target, map[string]any{})
	})
}

// ResetBMC restarts the BMC itself (Manager.Reset, GracefulRestart when
// offered) and waits until it answers and takes a login again. The
// session is gone with the reboot; the next call opens a new one.
func (b *BMC) ResetBMC(ctx context.Context) error {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	return b.resetBMC(ctx)
}

// resetBMC is ResetBMC for a caller that holds the lock.
func (b *BMC) resetBMC(ctx context.Context) error {
	err := b.do(ctx, "reset the BMC", func(c *gofish.APIClient) error {
		sys, err := b.getSystem(c)
		if err != nil {
			return err
		}
		mgrs, err := sys.ManagedBy()
		if err != nil {
			return err
		}
		if len(mgrs) == 0 {
			return fmt.Errorf("system %s names no manager (Links.ManagedBy)", sys.ODataID)
		}
		m := mgrs[0]
		rt := schemas.GracefulRestartResetType
		if types, _ := m.GetSupportedResetTypes(); len(types) > 0 {
			rt = types[0]
			for _, t := range types {
				if t == schemas.GracefulRestartResetType {
					rt = t
				}
			}
		}
		b.log.Info("redfish resetting the BMC", "manager", m.ODataID, "type", rt)
		if _, err = m.Reset(rt); err != nil {
			return &reqError{"POST", m.ODataID + " (Manager.Reset)", err}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The sessions died with the BMC: forget ours without a logout.
	b.client, b.systemURI = nil, ""
	b.rt.forget() // a new firmware may serve another root
	b.http.CloseIdleConnections()
	start := time.Now()
	outOfTime := func(err error) error {
		return fmt.Errorf("redfish BMC %s accepted a reset but did not answer again within %s, the time left for this operation: %w",
			b.cfg.endpoint, round(time.Since(start)), err)
	}
	select {
	case <-ctx.Done():
		return outOfTime(ctx.Err())
	case <-time.After(b.opts.BMCResetSettle):
	}
	deadline := time.Now().Add(b.opts.BMCResetTimeout)
	for {
		_, err := b.readSystem(ctx, "reach the BMC after its reset")
		if err == nil {
			b.log.Info("redfish BMC is back after its reset")
			return nil
		}
		if ctx.Err() != nil {
			return outOfTime(err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redfish BMC %s did not come back within %s after its reset: %w", b.cfg.endpoint, b.opts.BMCResetTimeout, err)
		}
		b.client = nil
		select {
		case <-ctx.Done():
			return outOfTime(ctx.Err())
		case <-time.After(b.opts.PollInterval):
		}
	}
}

// RunStep implements drivers.BMC: the driver's own out-of-band steps.
func (b *BMC) RunStep(ctx context.Context, iface, step string, args map[string]any) error {
	switch iface + "." + step {
	case "bios.apply_configuration":
		settings, err := parseSettings(args)
		if err != nil {
			return err
		}
		return b.ApplyBIOSSettings(ctx, settings)
	case "bios.factory_reset":
		return b.FactoryResetBIOS(ctx)
	case "management.reset_bmc":
		return b.ResetBMC(ctx)
	case "firmware.update":
		updates, err := drivers.ParseFirmwareSettings(args["settings"])
		if err != nil {
			return err
		}
		_, err = b.UpdateFirmware(ctx, updates)
		return err
	case "raid.create_configuration", "raid.apply_configuration", "raid.delete_configuration":
		_, err := b.RunRAIDStep(ctx, iface+"."+step, args)
		return err
	}
	return fmt.Errorf("redfish driver has no step %s.%s; it has bios.apply_configuration, bios.factory_reset, management.reset_bmc, "+
		"firmware.update, raid.create_configuration, raid.apply_configuration and raid.delete_configuration", iface, step)
}

// runRAIDStep creates the logical disks of args[configArg] (Ironic's
// create_configuration and apply_configuration), honouring
// create_root_volume, create_nonroot_volumes (default true) and
// delete_existing (default false for create, true for apply).
func (b *BMC) runRAIDStep(ctx context.Context, step string, args map[string]any, configArg string, deleteDefault bool) ([]drivers.Volume, error) {
	raw, ok := args[configArg]
	if !ok {
		return nil, fmt.Errorf("step %s: argument %s is missing", step, configArg)
	}
	disks, err := drivers.ParseTargetRAIDConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("step %s: %s: %v", step, configArg, err)
	}
	flag := func(name string, def bool) (bool, error) {
		v, ok := args[name]
		if !ok {
			return def, nil
		}
		bv, ok := v.(bool)
		if !ok {
			return false, fmt.Errorf("step %s: argument %s must be true or false, not %v", step, name, v)
		}
		return bv, nil
	}
	root, err := flag(drivers.ArgRaidCreateRoot, true)
	if err != nil {
		return nil, err
	}
	nonroot, err := flag(drivers.ArgRaidCreateNonroot, true)
	if err != nil {
		return nil, err
	}
	del, err := flag(drivers.ArgDeleteExisting, deleteDefault)
	if err != nil {
		return nil, err
	}
	var want []drivers.LogicalDisk
	for _, d := range disks {
		if d.IsRootVolume && root || !d.IsRootVolume && nonroot {
			want = append(want, d)
		}
	}
	if len(want) == 0 {
		return nil, fmt.Errorf("step %s: nothing to create: %s=%v and %s=%v leave none of the %d logical disks", step,
			drivers.ArgRaidCreateRoot, root, drivers.ArgRaidCreateNonroot, nonroot, len(disks))
	}
	return b.CreateRAID(ctx, want, del)
}
