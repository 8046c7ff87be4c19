package redfish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish"

	"github.com/bmedge/bmedge/drivers"
)

var _ drivers.RAIDBMC = (*BMC)(nil)

// Hardware RAID through Redfish Storage/Volumes, as Ironic's redfish
// RAID interface: a logical disk of target_raid_config becomes a POST to
// a storage's Volumes with RAIDType (raid_level "1+0" is RAID10),
// CapacityBytes (size_gb GiB; left out for "MAX", so that the
// controller gives the largest size) and Links.Drives (physical_disks,
// drive Ids; chosen among the free drives when not given, honouring
// number_of_physical_disks, disk_type and interface_type). controller
// names a storage by its Id. As in Ironic, "MAX" needs physical_disks.

const gib = int64(1) << 30

// raidTypes maps Ironic's raid_level to Redfish's RAIDType.
var raidTypes = map[string]string{"0": "RAID0", "1": "RAID1", "5": "RAID5", "6": "RAID6", "1+0": "RAID10", "5+0": "RAID50", "6+0": "RAID60"}

// raidDisks is the least and most drives of a level (0: no bound).
var raidDisks = map[string][2]int{"0": {1, 0}, "1": {2, 2}, "5": {3, 0}, "6": {4, 0}, "1+0": {4, 0}, "5+0": {6, 0}, "6+0": {8, 0}}

type storageDoc struct {
	ODataID            string `json:"@odata.id"`
	ID                 string `json:"Id"`
	StorageControllers []struct {
		SupportedRAIDTypes []string `json:"SupportedRAIDTypes"`
	} `json:"StorageControllers"`
	Drives  []link `json:"Drives"`
	Volumes link   `json:"Volumes"`

	drives  []driveDoc
	volumes []volumeDoc
	// applyTimes is the Volumes collection's
	// @Redfish.OperationApplyTimeSupport.SupportedValues.
	applyTimes []string
}

// onReset: the controller applies volume changes at the next reset only.
func (s *storageDoc) onReset() bool {
	return len(s.applyTimes) > 0 && !containsString(s.applyTimes, "Immediate") && containsString(s.applyTimes, "OnReset")
}

type driveDoc struct {
	ODataID       string `json:"@odata.id"`
	ID            string `json:"Id"`
	CapacityBytes int64  `json:"CapacityBytes"`
	MediaType     string `json:"MediaType"`
	Protocol      string `json:"Protocol"`
}

type volumeDoc struct {
	ODataID       string `json:"@odata.id"`
	ID            string `json:"Id"`
	Name          string `json:"Name"`
	RAIDType      string `json:"RAIDType"`
	VolumeType    string `json:"VolumeType"`
	CapacityBytes int64  `json:"CapacityBytes"`
	Links         struct {
		Drives []link `json:"Drives"`
	} `json:"Links"`
}

func (s *storageDoc) raidTypes() []string {
	var out []string
	for _, c := range s.StorageControllers {
		out = append(out, c.SupportedRAIDTypes...)
	}
	return out
}

func (s *storageDoc) driveByURI(uri string) *driveDoc {
	for i := range s.drives {
		if s.drives[i].ODataID == uri {
			return &s.drives[i]
		}
	}
	return nil
}

// volumeTypes maps the older Volume.VolumeType to Ironic's raid_level,
// as Ironic's redfish RAID does (StripedWithParity is RAID 5 or 6: 5;
// SpannedStripesWithParity: 5+0).
var volumeTypes = map[string]string{"NonRedundant": "0", "Mirrored": "1", "StripedWithParity": "5", "SpannedMirrors": "1+0", "SpannedStripesWithParity": "5+0"}

// RAIDLevel is Ironic's raid_level of a volume's RAIDType, else of its
// VolumeType ("" when neither is known).
func RAIDLevel(raidType, volumeType string) string {
	for l, t := range raidTypes {
		if t == raidType {
			return l
		}
	}
	return volumeTypes[volumeType]
}

func (s *storageDoc) volume(v volumeDoc) drivers.Volume {
	level := RAIDLevel(v.RAIDType, v.VolumeType)
	out := drivers.Volume{ID: v.ID, Name: v.Name, RAIDLevel: level, SizeGB: int(v.CapacityBytes / gib), Controller: s.ID, PhysicalDisks: []string{}}
	for _, d := range v.Links.Drives {
		id := d.ID[strings.LastIndex(d.ID, "/")+1:]
		if dd := s.driveByURI(d.ID); dd != nil {
			id = dd.ID
		}
		out.PhysicalDisks = append(out.PhysicalDisks, id)
	}
	return out
}

// storages reads the system's storage subsystems with their drives and
// volumes, in parallel. Only the system and its Storage collection must
// be readable: a storage, drive or volume that is not is left out and
// named in the warnings (its URL and the BMC's answer).
func (b *BMC) storages(c *gofish.APIClient) ([]*storageDoc, []string, error) {
	uri, err := b.findSystem(c)
	if err != nil {
		return nil, nil, err
	}
	var sys struct {
		Storage link `json:"Storage"`
	}
	if err := getJSON(c, uri, &sys); err != nil {
		return nil, nil, err
	}
	if sys.Storage.ID == "" {
		return nil, nil, fmt.Errorf("system %s has no Storage resource: the BMC offers no hardware RAID over Redfish", uri)
	}
	var col collectionDoc
	if err := getJSON(c, sys.Storage.ID, &col); err != nil {
		return nil, nil, err
	}
	in := &inspection{b: b, c: c}
	out := make([]*storageDoc, len(col.Members))
	var mu sync.Mutex
	var fns []func()
	for i, m := range col.Members {
		fns = append(fns, func() {
			s := &storageDoc{}
			if !in.get("storage", m.ID, s) {
				return
			}
			out[i] = s
			drives := make([]*driveDoc, len(s.Drives))
			var sub []func()
			for j, d := range s.Drives {
				sub = append(sub, func() {
					var dd driveDoc
					if in.get("storage drive", d.ID, &dd) {
						if dd.ODataID == "" {
							dd.ODataID = d.ID
						}
						drives[j] = &dd
					}
				})
			}
			if s.Volumes.ID != "" {
				sub = append(sub, func() {
					var vc struct {
						collectionDoc
						Apply struct {
							SupportedValues []string `json:"SupportedValues"`
						} `json:"@Redfish.OperationApplyTimeSupport"`
					}
					if !in.get("raid volumes", s.Volumes.ID, &vc) {
						return
					}
					s.applyTimes = vc.Apply.SupportedValues
					vols := make([]*volumeDoc, len(vc.Members))
					var vf []func()
					for k, v := range vc.Members {
						vf = append(vf, func() {
							var vd volumeDoc
							if in.get("raid volume", v.ID, &vd) {
								vols[k] = &vd
							}
						})
					}
					parallel(vf...)
					mu.Lock()
					for _, v := range vols {
						if v != nil {
							s.volumes = append(s.volumes, *v)
						}
					}
					mu.Unlock()
				})
			}
			parallel(sub...)
			for _, d := range drives {
				if d != nil {
					s.drives = append(s.drives, *d)
				}
			}
		})
	}
	parallel(fns...)
	if in.fatal != nil {
		return nil, nil, in.fatal
	}
	var st []*storageDoc
	for _, s := range out {
		if s != nil {
			st = append(st, s)
		}
	}
	sort.Strings(in.warnings)
	return st, in.warnings, nil
}

// RAIDVolumes lists the volumes of every storage of the system; what
// could not be read is logged (RAIDReading returns it).
func (b *BMC) RAIDVolumes(ctx context.Context) ([]drivers.Volume, error) {
	out, warnings, err := b.RAIDReading(ctx)
	for _, w := range warnings {
		b.log.Warn("redfish RAID reading is partial", "missing", w)
	}
	return out, err
}

// RAIDReading lists the volumes of every storage of the system and names
// each storage, drive or volume that could not be read.
func (b *BMC) RAIDReading(ctx context.Context) ([]drivers.Volume, []string, error) {
	ctx, cancel := reserve(reading(ctx))
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return nil, nil, err
	}
	defer b.unlock()
	var out []drivers.Volume
	var warnings []string
	err := b.do(ctx, "read the RAID volumes", func(c *gofish.APIClient) error {
		st, w, err := b.storages(c)
		if err != nil {
			return err
		}
		out, warnings = nil, w
		for _, s := range st {
			for _, v := range s.volumes {
				out = append(out, s.volume(v))
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Controller+"/"+out[i].ID < out[j].Controller+"/"+out[j].ID })
		return nil
	})
	return out, warnings, err
}

// DeleteRAID deletes every volume of the system.
func (b *BMC) DeleteRAID(ctx context.Context) error {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return err
	}
	defer b.unlock()
	return b.deleteVolumes(ctx)
}

func (b *BMC) deleteVolumes(ctx context.Context) error {
	var st []*storageDoc
	if err := b.do(ctx, "read the RAID volumes", func(c *gofish.APIClient) error {
		var err error
		st, _, err = b.storages(c)
		return err
	}); err != nil {
		return err
	}
	var pending []string // volumes deleted OnReset
	for _, s := range st {
		for _, v := range s.volumes {
			var task string
			onReset := s.onReset()
			err := b.do(ctx, "delete RAID volume "+v.ID, func(c *gofish.APIClient) error {
				var resp *http.Response
				var err error
				if onReset {
					// The controller applies it at the next reset, as
					// Ironic asks such a controller.
					body := bytes.NewReader([]byte(`{"@Redfish.OperationApplyTime": "OnReset"}`))
					resp, err = c.RunRawRequestWithHeaders(http.MethodDelete, v.ODataID, body, "application/json", nil)
				} else {
					resp, err = c.Delete(v.ODataID)
				}
				if statusOf(err) == http.StatusNotFound {
					return nil // gone already (a retried delete)
				}
				if err != nil {
					return &reqError{"DELETE", v.ODataID, err}
				}
				defer resp.Body.Close()
				if resp.StatusCode == http.StatusAccepted {
					task = resp.Header.Get("Location")
				}
				return nil
			})
			if err != nil {
				return err
			}
			if task != "" {
				if err := b.waitTask(ctx, task); err != nil {
					return err
				}
			}
			if onReset {
				pending = append(pending, v.ODataID)
				continue
			}
			b.log.Info("redfish RAID volume deleted", "volume", v.ODataID)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	b.log.Info("redfish RAID controller deletes volumes at the next reset; resetting the system", "volumes", pending)
	if err := b.restartSystem(ctx); err != nil {
		return fmt.Errorf("the controller deletes volumes %v at the next reset (OnReset), and the reset failed: %w", pending, err)
	}
	start := time.Now()
	for {
		var left []string
		err := b.do(ctx, "read the RAID volumes", func(c *gofish.APIClient) error {
			st, _, err := b.storages(c)
			if err != nil {
				return err
			}
			left = nil
			for _, s := range st {
				for _, v := range s.volumes {
					if containsString(pending, v.ODataID) {
						left = append(left, v.ODataID)
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
		if time.Since(start) > b.opts.PowerTimeout || ctx.Err() != nil {
			return fmt.Errorf("the BMC accepted the deletes and the system was reset, but volumes %v are still there", left)
		}
		select {
		case <-ctx.Done():
		case <-time.After(b.opts.PollInterval):
		}
	}
}

// CreateRAID implements drivers.RAIDBMC.
func (b *BMC) CreateRAID(ctx context.Context, disks []drivers.LogicalDisk, deleteExisting bool) ([]drivers.Volume, error) {
	ctx, cancel := reserve(ctx)
	defer cancel()
	if err := b.lockWrite(ctx); err != nil {
		return nil, err
	}
	defer b.unlock()
	if deleteExisting {
		if err := b.deleteVolumes(ctx); err != nil {
			return nil, err
		}
	}
	ordered := append([]drivers.LogicalDisk(nil), disks...)
	sort.SliceStable(ordered, func(i, j int) bool { return ordered[i].IsRootVolume && !ordered[j].IsRootVolume })
	var created []drivers.Volume
	for i, ld := range ordered {
		v, err := b.createVolume(ctx, ld)
		if err != nil {
			return created, fmt.Errorf("RAID logical disk %d of %d (RAID %s, %s): %w", i+1, len(ordered), ld.RAIDLevel, sizeText(ld), err)
		}
		v.IsRootVolume = ld.IsRootVolume
		created = append(created, v)
	}
	return created, nil
}

func sizeText(ld drivers.LogicalDisk) string {
	if ld.SizeMax {
		return "size MAX"
	}
	return fmt.Sprintf("%d GiB", ld.SizeGB)
}

// plan picks the storage and drives of a logical disk.
func plan(st []*storageDoc, ld drivers.LogicalDisk) (*storageDoc, []driveDoc, error) {
	rt, ok := raidTypes[ld.RAIDLevel]
	if !ok {
		return nil, nil, fmt.Errorf("raid_level %s has no Redfish RAIDType; this driver takes %s", ld.RAIDLevel, "0, 1, 5, 6, 1+0, 5+0, 6+0")
	}
	if ld.SharePhysicalDisks {
		return nil, nil, fmt.Errorf("share_physical_disks is not supported by the redfish RAID of this system; give each logical disk its own drives")
	}
	if ld.SizeMax && len(ld.PhysicalDisks) == 0 {
		return nil, nil, fmt.Errorf("size_gb \"MAX\" needs physical_disks (as in Ironic's redfish RAID)")
	}
	var s *storageDoc
	for _, c := range st {
		switch {
		case ld.Controller != "":
			if c.ID == ld.Controller {
				s = c
			}
		case len(ld.PhysicalDisks) > 0:
			for _, d := range c.drives {
				if d.ID == ld.PhysicalDisks[0] {
					s = c
				}
			}
		case s == nil && (len(c.raidTypes()) == 0 || containsString(c.raidTypes(), rt)):
			s = c
		}
	}
	if s == nil && ld.Controller == "" && len(ld.PhysicalDisks) == 0 && len(st) > 0 {
		s = st[0] // none offers the type: say so below
	}
	if s == nil && ld.Controller == "" && len(ld.PhysicalDisks) > 0 {
		var have []string
		for _, c := range st {
			for _, d := range c.drives {
				have = append(have, d.ID)
			}
		}
		return nil, nil, fmt.Errorf("the system has no drive %s (it has %s)", ld.PhysicalDisks[0], orNone(have))
	}
	if s == nil {
		var ids []string
		for _, c := range st {
			ids = append(ids, c.ID)
		}
		return nil, nil, fmt.Errorf("no storage controller matches (controller %q, physical_disks %v); the system has %s", ld.Controller, ld.PhysicalDisks, orNone(ids))
	}
	if types := s.raidTypes(); len(types) > 0 && !containsString(types, rt) {
		return nil, nil, fmt.Errorf("controller %s does not offer %s (it offers %s)", s.ID, rt, strings.Join(types, ", "))
	}
	used := map[string]string{}
	for _, v := range s.volumes {
		for _, d := range v.Links.Drives {
			used[d.ID] = v.ID
		}
	}
	var chosen []driveDoc
	if len(ld.PhysicalDisks) > 0 {
		for _, id := range ld.PhysicalDisks {
			var found *driveDoc
			for i := range s.drives {
				if s.drives[i].ID == id {
					found = &s.drives[i]
				}
			}
			if found == nil {
				var have []string
				for _, d := range s.drives {
					have = append(have, d.ID)
				}
				return nil, nil, fmt.Errorf("controller %s has no drive %s (it has %s)", s.ID, id, orNone(have))
			}
			if v, busy := used[found.ODataID]; busy {
				return nil, nil, fmt.Errorf("drive %s belongs to volume %s already; delete it first (delete_existing)", id, v)
			}
			chosen = append(chosen, *found)
		}
	} else {
		want := ld.NumberOfPhysicalDisks
		if want == 0 {
			want = raidDisks[ld.RAIDLevel][0]
		}
		for _, d := range s.drives {
			if _, busy := used[d.ODataID]; busy || len(chosen) == want {
				continue
			}
			if ld.DiskType != "" && !strings.EqualFold(d.MediaType, ld.DiskType) {
				continue
			}
			if ld.InterfaceType != "" && !strings.EqualFold(d.Protocol, ld.InterfaceType) {
				continue
			}
			if int64(ld.SizeGB)*gib > d.CapacityBytes*int64(want) {
				continue
			}
			chosen = append(chosen, d)
		}
		if len(chosen) < want {
			return nil, nil, fmt.Errorf("controller %s has %d free drives that fit (disk_type %q, interface_type %q); RAID %s needs %d", s.ID, len(chosen), ld.DiskType, ld.InterfaceType, ld.RAIDLevel, want)
		}
	}
	lim := raidDisks[ld.RAIDLevel]
	if len(chosen) < lim[0] || lim[1] > 0 && len(chosen) > lim[1] {
		return nil, nil, fmt.Errorf("RAID %s takes %s drives, not %d", ld.RAIDLevel, diskRange(lim), len(chosen))
	}
	if ld.NumberOfPhysicalDisks > 0 && len(chosen) != ld.NumberOfPhysicalDisks {
		return nil, nil, fmt.Errorf("number_of_physical_disks is %d but physical_disks names %d", ld.NumberOfPhysicalDisks, len(chosen))
	}
	return s, chosen, nil
}

func diskRange(l [2]int) string {
	if l[1] == l[0] {
		return fmt.Sprint(l[0])
	}
	return fmt.Sprintf("at least %d", l[0])
}

func containsString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func sameDrives(v volumeDoc, chosen []driveDoc) bool {
	if len(v.Links.Drives) != len(chosen) {
		return false
	}
	set := map[string]bool{}
	for _, d := range v.Links.Drives {
		set[d.ID] = true
	}
	for _, d := range chosen {
		if !set[d.ODataID] {
			return false
		}
	}
	return true
}

func (b *BMC) createVolume(ctx context.Context, ld drivers.LogicalDisk) (drivers.Volume, error) {
	var out drivers.Volume
	var task string
	var s *storageDoc
	var chosen []driveDoc
	onReset := false
	err := b.do(ctx, "create a RAID volume", func(c *gofish.APIClient) error {
		st, _, err := b.storages(c)
		if err != nil {
			return err
		}
		s, chosen, err = plan(st, ld)
		if err != nil {
			return &planError{err}
		}
		body := map[string]any{"RAIDType": raidTypes[ld.RAIDLevel]}
		if !ld.SizeMax {
			body["CapacityBytes"] = int64(ld.SizeGB) * gib
		}
		var links []any
		for _, d := range chosen {
			links = append(links, map[string]any{"@odata.id": d.ODataID})
		}
		body["Links"] = map[string]any{"Drives": links}
		if ld.VolumeName != "" {
			body["Name"] = ld.VolumeName
		}
		// A controller that applies volume changes only at the next
		// reset (SupportedApplyTimes OnReset, no Immediate) is asked
		// so, and the system is reset below, as Ironic does.
		onReset = s.onReset()
		if onReset {
			body["@Redfish.OperationApplyTime"] = "OnReset"
		}
		resp, err := c.Post(s.Volumes.ID, body)
		if err != nil {
			return &reqError{"POST", s.Volumes.ID, err}
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			task = resp.Header.Get("Location")
			return nil
		}
		if onReset {
			return nil
		}
		var v volumeDoc
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if json.Unmarshal(data, &v) != nil || v.ID == "" {
			if loc := resp.Header.Get("Location"); loc != "" {
				if err := getJSON(c, loc, &v); err != nil {
					return err
				}
			}
		}
		if v.ID == "" {
			task = "(none)"
			return nil
		}
		out = s.volume(v)
		return nil
	})
	var pe *planError
	if errors.As(err, &pe) {
		return out, pe.err
	}
	if err != nil {
		return out, err
	}
	if task != "" && task != "(none)" {
		if err := b.waitTask(ctx, task); err != nil {
			return out, err
		}
	}
	if onReset {
		b.log.Info("redfish RAID controller applies volumes at the next reset; resetting the system", "controller", s.ID)
		if err := b.restartSystem(ctx); err != nil {
			return out, fmt.Errorf("controller %s applies the volume at the next reset (OnReset), and the reset failed: %w", s.ID, err)
		}
	}
	if task != "" || onReset {
		start := time.Now()
		for {
			found := false
			err = b.do(ctx, "read the RAID volumes", func(c *gofish.APIClient) error {
				st, _, err := b.storages(c)
				if err != nil {
					return err
				}
				for _, s2 := range st {
					for _, v := range s2.volumes {
						if sameDrives(v, chosen) {
							out, found = s2.volume(v), true
						}
					}
				}
				return nil
			})
			if err != nil {
				return out, err
			}
			if found {
				break
			}
			if !onReset || time.Since(start) > b.opts.PowerTimeout || ctx.Err() != nil {
				var ids []string
				for _, d := range chosen {
					ids = append(ids, d.ID)
				}
				return out, fmt.Errorf("the BMC accepted the volume (controller %s) but no volume spans drives %v afterwards", s.ID, ids)
			}
			select {
			case <-ctx.Done():
			case <-time.After(b.opts.PollInterval):
			}
		}
	}
	b.log.Info("redfish RAID volume created", "volume", out.ID, "raid_level", out.RAIDLevel, "size_gb", out.SizeGB, "drives", out.PhysicalDisks, "on_reset", onReset)
	return out, nil
}

// planError is a logical disk the BMC's storage cannot take: not retried.
type planError struct{ err error }

func (e *planError) Error() string { return e.err.Error() }

var _ drivers.RAIDStepper = (*BMC)(nil)

// RunRAIDStep implements drivers.RAIDStepper: raid.create_configuration
// (the node's target_raid_config, which the coordinator passes as the
// target_raid_config argument; delete_existing default false),
// raid.apply_configuration (the raid_config argument; delete_existing
// default true) and raid.delete_configuration. Afterwards the system's
// volumes are read back: they are the raid_config returned, in Ironic's
// shape (update_raid_config's id, name, controller, size_gb, raid_level,
// with physical_disks and, for the root volume this step created,
// is_root_volume).
func (b *BMC) RunRAIDStep(ctx context.Context, step string, args map[string]any) (map[string]any, error) {
	var created []drivers.Volume
	var err error
	switch step {
	case "raid.create_configuration":
		if _, ok := args[drivers.ArgTargetRaidConfig]; !ok {
			return nil, fmt.Errorf("step raid.create_configuration: the node has no target_raid_config; set one with PUT /v1/nodes/{node}/states/raid (API 1.12; baremetal node set NODE --target-raid-config FILE), " +
				`e.g. {"logical_disks": [{"size_gb": 100, "raid_level": "1", "is_root_volume": true}]}`)
		}
		created, err = b.runRAIDStep(ctx, step, args, drivers.ArgTargetRaidConfig, false)
	case "raid.apply_configuration":
		created, err = b.runRAIDStep(ctx, step, args, drivers.ArgRaidConfig, true)
	case "raid.delete_configuration":
		err = b.DeleteRAID(ctx)
	default:
		return nil, fmt.Errorf("redfish driver has no RAID step %s; it has raid.create_configuration, raid.apply_configuration and raid.delete_configuration", step)
	}
	if err != nil {
		return nil, err
	}
	vols, err := b.RAIDVolumes(ctx)
	if err != nil {
		return nil, fmt.Errorf("step %s done, but reading the volumes back failed: %w", step, err)
	}
	return RAIDConfig(vols, created)
}

// RAIDConfig is raid_config in Ironic's shape for the volumes read back,
// the root volume among created marked is_root_volume. It fails when
// the BMC reports more than drivers.MaxRAIDVolumes volumes.
func RAIDConfig(vols, created []drivers.Volume) (map[string]any, error) {
	if len(vols) > drivers.MaxRAIDVolumes {
		return nil, fmt.Errorf("the BMC reports %d RAID volumes, more than the %d a node's raid_config holds", len(vols), drivers.MaxRAIDVolumes)
	}
	root := map[string]bool{}
	for _, v := range created {
		if v.IsRootVolume {
			root[v.Controller+"/"+v.ID] = true
		}
	}
	lds := make([]any, 0, len(vols))
	for _, v := range vols {
		disks := make([]any, 0, len(v.PhysicalDisks))
		for _, d := range v.PhysicalDisks {
			disks = append(disks, d)
		}
		ld := map[string]any{"id": v.ID, "name": v.Name, "controller": v.Controller, "size_gb": v.SizeGB,
			"raid_level": v.RAIDLevel, "physical_disks": disks}
		if root[v.Controller+"/"+v.ID] {
			ld["is_root_volume"] = true
		}
		lds = append(lds, ld)
	}
	return map[string]any{"logical_disks": lds}, nil
}
