package vbmc

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// A system's storage: one RAID controller ("RAID.Integrated.1") with
// DriveCount drives of DriveBytes each (default 4 of 100 GiB) and a
// Volumes collection that takes POST (RAID0, RAID1, RAID10) and DELETE,
// both carried out at once (201/204), as many controllers do.

const storageID = "RAID.Integrated.1"

// RAID types the controller offers and the drives each needs.
var raidTypes = []string{"RAID0", "RAID1", "RAID10"}

type drive struct {
	id    string
	bytes int64
}

type volume struct {
	id, name, raid string
	bytes          int64
	drives         []string
}

// VolumeInfo is what a test reads back from a volume.
type VolumeInfo struct {
	ID, Name, RAIDType string
	CapacityBytes      int64
	Drives             []string
}

// Volumes lists a system's volumes.
func (b *BMC) Volumes(systemID string) ([]VolumeInfo, error) {
	s := b.system(systemID)
	if s == nil {
		return nil, fmt.Errorf("vbmc: no system %q", systemID)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []VolumeInfo
	for _, v := range s.volumes {
		out = append(out, VolumeInfo{ID: v.id, Name: v.name, RAIDType: v.raid, CapacityBytes: v.bytes, Drives: append([]string(nil), v.drives...)})
	}
	return out, nil
}

func storagePath(s *system) string { return sysPath(s) + "/Storage/" + storageID }

func (b *BMC) routeStorage(w http.ResponseWriter, r *http.Request, s *system, segs []string) {
	n := len(segs)
	switch {
	case n == 0:
		b.get(w, r, func() any {
			return collection("#StorageCollection.StorageCollection", "Storage Collection", sysPath(s)+"/Storage", []string{storagePath(s)})
		})
	case segs[0] != storageID:
		notFound(w, r)
	case n == 1:
		b.get(w, r, func() any { return b.storageResource(s) })
	case n == 3 && segs[1] == "Drives":
		for _, d := range s.drives {
			if d.id == segs[2] {
				b.get(w, r, func() any { return driveResource(s, d) })
				return
			}
		}
		notFound(w, r)
	case n == 2 && segs[1] == "Volumes":
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, b.volumeCollection(s))
		case http.MethodPost:
			b.createVolume(w, r, s)
		default:
			methodNotAllowed(w, r)
		}
	case n == 3 && segs[1] == "Volumes":
		switch r.Method {
		case http.MethodGet:
			b.mu.Lock()
			v := findVolume(s, segs[2])
			var res any
			if v != nil {
				res = volumeResource(s, v)
			}
			b.mu.Unlock()
			if v == nil {
				notFound(w, r)
				return
			}
			writeJSON(w, http.StatusOK, res)
		case http.MethodDelete:
			b.deleteVolume(w, r, s, segs[2])
		default:
			methodNotAllowed(w, r)
		}
	default:
		notFound(w, r)
	}
}

func findVolume(s *system, id string) *volume {
	for _, v := range s.volumes {
		if v.id == id {
			return v
		}
	}
	return nil
}

func (b *BMC) storageResource(s *system) any {
	var drives []any
	for _, d := range s.drives {
		drives = append(drives, odataID(storagePath(s)+"/Drives/"+d.id))
	}
	return map[string]any{
		"@odata.type": "#Storage.v1_9_0.Storage",
		"@odata.id":   storagePath(s),
		"Id":          storageID,
		"Name":        "Integrated RAID controller",
		"Status":      map[string]any{"State": "Enabled", "Health": "OK"},
		"StorageControllers": []any{map[string]any{
			"@odata.id":          storagePath(s) + "#/StorageControllers/0",
			"MemberId":           "0",
			"Name":               "Integrated RAID controller",
			"SupportedRAIDTypes": raidTypes,
			"Status":             map[string]any{"State": "Enabled", "Health": "OK"},
		}},
		"Drives":                         drives,
		"Drives@odata.count":             len(drives),
		"Volumes":                        odataID(storagePath(s) + "/Volumes"),
		"Description":                    "Virtual RAID controller of the bmedge virtual BMC",
		"StorageControllers@odata.count": 1,
	}
}

func driveResource(s *system, d drive) any {
	return map[string]any{
		"@odata.type":   "#Drive.v1_7_0.Drive",
		"@odata.id":     storagePath(s) + "/Drives/" + d.id,
		"Id":            d.id,
		"Name":          "Physical disk " + d.id,
		"CapacityBytes": d.bytes,
		"MediaType":     "HDD",
		"Protocol":      "SAS",
		"SerialNumber":  "VBMC-" + s.id + "-" + d.id,
		"Status":        map[string]any{"State": "Enabled", "Health": "OK"},
	}
}

func (b *BMC) volumeCollection(s *system) any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ms []string
	for _, v := range s.volumes {
		ms = append(ms, storagePath(s)+"/Volumes/"+v.id)
	}
	c := collection("#VolumeCollection.VolumeCollection", "Volume Collection", storagePath(s)+"/Volumes", ms)
	c["@Redfish.OperationApplyTimeSupport"] = map[string]any{"SupportedValues": []string{"Immediate"}}
	return c
}

func volumeResource(s *system, v *volume) any {
	var drives []any
	for _, d := range v.drives {
		drives = append(drives, odataID(storagePath(s)+"/Drives/"+d))
	}
	return map[string]any{
		"@odata.type":   "#Volume.v1_5_0.Volume",
		"@odata.id":     storagePath(s) + "/Volumes/" + v.id,
		"Id":            v.id,
		"Name":          v.name,
		"RAIDType":      v.raid,
		"CapacityBytes": v.bytes,
		"Encrypted":     false,
		"Status":        map[string]any{"State": "Enabled", "Health": "OK"},
		"Links":         map[string]any{"Drives": drives},
	}
}

// raidCapacity is the most a volume of this type can hold on these drives.
func raidCapacity(raid string, sizes []int64) (int64, string) {
	n := int64(len(sizes))
	if n == 0 {
		return 0, "Links.Drives names no drive"
	}
	small := sizes[0]
	for _, x := range sizes {
		small = min(small, x)
	}
	switch raid {
	case "RAID0":
		return small * n, ""
	case "RAID1":
		if n != 2 {
			return 0, fmt.Sprintf("RAID1 takes exactly 2 drives, not %d", n)
		}
		return small, ""
	case "RAID10":
		if n < 4 || n%2 != 0 {
			return 0, fmt.Sprintf("RAID10 takes an even number of drives, at least 4, not %d", n)
		}
		return small * n / 2, ""
	}
	return 0, fmt.Sprintf("RAIDType %s is not one of %s", raid, strings.Join(raidTypes, ", "))
}

func (b *BMC) createVolume(w http.ResponseWriter, r *http.Request, s *system) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	for k := range body {
		switch k {
		case "RAIDType", "CapacityBytes", "Links", "Name", "@Redfish.OperationApplyTime":
		default:
			writeError(w, http.StatusBadRequest, "PropertyUnknown",
				fmt.Sprintf("The property %s is not in the list of valid properties for creating a volume.", k), "Remove the unknown property from the request body and resubmit the request.")
			return
		}
	}
	if at, ok := body["@Redfish.OperationApplyTime"]; ok && at != "Immediate" {
		badValue(w, "@Redfish.OperationApplyTime", at, []string{"Immediate"})
		return
	}
	raid, _ := body["RAIDType"].(string)
	if !contains(raidTypes, raid) {
		badValue(w, "RAIDType", body["RAIDType"], raidTypes)
		return
	}
	links, _ := body["Links"].(map[string]any)
	list, _ := links["Drives"].([]any)
	if len(list) == 0 {
		writeError(w, http.StatusBadRequest, "PropertyMissing", "The property Links/Drives is required: the drives the volume spans.", "Name the drives in Links/Drives.")
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	used := map[string]string{}
	for _, v := range s.volumes {
		for _, d := range v.drives {
			used[d] = v.id
		}
	}
	var ids []string
	var sizes []int64
	for _, l := range list {
		m, _ := l.(map[string]any)
		ref, _ := m["@odata.id"].(string)
		id := strings.TrimPrefix(ref, storagePath(s)+"/Drives/")
		var found *drive
		for i := range s.drives {
			if s.drives[i].id == id {
				found = &s.drives[i]
			}
		}
		if found == nil || id == ref {
			writeError(w, http.StatusBadRequest, "ResourceMissingAtURI", fmt.Sprintf("The drive %v is not a drive of this controller.", l), "Name drives of "+storagePath(s)+"/Drives.")
			return
		}
		if v, busy := used[id]; busy {
			writeError(w, http.StatusConflict, "ResourceInUse", fmt.Sprintf("The drive %s belongs to volume %s.", id, v), "Delete that volume first or choose other drives.")
			return
		}
		used[id] = "new"
		ids = append(ids, id)
		sizes = append(sizes, found.bytes)
	}
	most, why := raidCapacity(raid, sizes)
	if why != "" {
		writeError(w, http.StatusBadRequest, "ActionParameterValueError", why+".", "Choose a number of drives the RAID type takes.")
		return
	}
	size := most
	if raw, present := body["CapacityBytes"]; present {
		f, ok := raw.(float64)
		if !ok || f <= 0 || f != float64(int64(f)) {
			writeError(w, http.StatusBadRequest, "PropertyValueTypeError", fmt.Sprintf("CapacityBytes %v is not a positive integer.", raw), "Give CapacityBytes as a positive integer or leave it out for the largest volume.")
			return
		}
		if int64(f) > most {
			writeError(w, http.StatusBadRequest, "PropertyValueOutOfRange",
				fmt.Sprintf("CapacityBytes %d is more than a %s volume on these drives can hold (%d).", int64(f), raid, most), "Ask for at most the capacity the drives give.")
			return
		}
		size = int64(f)
	}
	s.volSeq++
	v := &volume{id: strconv.Itoa(s.volSeq), raid: raid, bytes: size, drives: ids}
	v.name, _ = body["Name"].(string)
	if v.name == "" {
		v.name = "Volume " + v.id
	}
	s.volumes = append(s.volumes, v)
	b.log.Info("vbmc volume created", "system", s.id, "volume", v.id, "raid", raid, "bytes", size)
	w.Header().Set("Location", storagePath(s)+"/Volumes/"+v.id)
	writeJSON(w, http.StatusCreated, volumeResource(s, v))
}

func (b *BMC) deleteVolume(w http.ResponseWriter, r *http.Request, s *system, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, v := range s.volumes {
		if v.id == id {
			s.volumes = append(s.volumes[:i], s.volumes[i+1:]...)
			b.log.Info("vbmc volume deleted", "system", s.id, "volume", id)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	notFound(w, r)
}
