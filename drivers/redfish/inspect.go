package redfish

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/stmcginnis/gofish"

	"github.com/bmedge/bmedge/drivers"
)

var _ drivers.Inspector = (*BMC)(nil)

// Out-of-band inspection, as Ironic's redfish inspect interface: the
// system's processors, memory, drives, Ethernet interfaces, boot mode
// and identity, read from the Redfish tree without booting the ramdisk.
// The system must be readable; each sub-resource that is not (a 404, a
// 500, a body that does not parse) costs only its fields and is named in
// Warnings with its URL and the BMC's answer. Independent reads go in
// parallel, bounded by the client's per-BMC concurrency.

// instructionSets maps Redfish's Processor.InstructionSet to Ironic's
// cpu_arch (Ironic's PROCESSOR_INSTRUCTION_SET_MAP).
var instructionSets = map[string]string{
	"x86-64": "x86_64", "x86": "i686", "ARM-A64": "aarch64", "ARM-A32": "arm",
	"IA-64": "ia64", "MIPS64": "mips64", "MIPS32": "mips", "PowerISA": "ppc64le", "RV64": "riscv64",
}

// processorArchs maps Processor.ProcessorArchitecture when no
// InstructionSet is given (Ironic's CPU_ARCH_MAP).
var processorArchs = map[string]string{"x86": "x86_64", "IA-64": "ia64", "ARM": "arm", "MIPS": "mips", "Power": "ppc64le", "RISC-V": "riscv64"}

// CPUArch is Ironic's cpu_arch for a processor's InstructionSet and
// ProcessorArchitecture ("" when neither names a known architecture).
func CPUArch(instructionSet, architecture string) string {
	if a := instructionSets[instructionSet]; a != "" {
		return a
	}
	return processorArchs[architecture]
}

type statusDoc struct {
	State string `json:"State"`
}

type inspectSystemDoc struct {
	ODataID          string `json:"@odata.id"`
	Manufacturer     string `json:"Manufacturer"`
	Model            string `json:"Model"`
	SerialNumber     string `json:"SerialNumber"`
	BiosVersion      string `json:"BiosVersion"`
	ProcessorSummary struct {
		Count                 *int   `json:"Count"`
		LogicalProcessorCount *int   `json:"LogicalProcessorCount"`
		Model                 string `json:"Model"`
	} `json:"ProcessorSummary"`
	MemorySummary struct {
		TotalSystemMemoryGiB *float64 `json:"TotalSystemMemoryGiB"`
	} `json:"MemorySummary"`
	Boot struct {
		BootSourceOverrideMode string `json:"BootSourceOverrideMode"`
	} `json:"Boot"`
	Processors         link `json:"Processors"`
	Storage            link `json:"Storage"`
	SimpleStorage      link `json:"SimpleStorage"`
	EthernetInterfaces link `json:"EthernetInterfaces"`
	SecureBoot         link `json:"SecureBoot"`
	Bios               link `json:"Bios"`
}

type processorDoc struct {
	ProcessorType         string    `json:"ProcessorType"`
	ProcessorArchitecture string    `json:"ProcessorArchitecture"`
	InstructionSet        string    `json:"InstructionSet"`
	Model                 string    `json:"Model"`
	TotalCores            *int      `json:"TotalCores"`
	TotalThreads          *int      `json:"TotalThreads"`
	Status                statusDoc `json:"Status"`
}

type inspectDriveDoc struct {
	ID               string    `json:"Id"`
	Name             string    `json:"Name"`
	CapacityBytes    *int64    `json:"CapacityBytes"`
	MediaType        string    `json:"MediaType"`
	RotationSpeedRPM *float64  `json:"RotationSpeedRPM"`
	SerialNumber     string    `json:"SerialNumber"`
	Model            string    `json:"Model"`
	Manufacturer     string    `json:"Manufacturer"`
	Status           statusDoc `json:"Status"`
	Identifiers      []struct {
		DurableName       string `json:"DurableName"`
		DurableNameFormat string `json:"DurableNameFormat"`
	} `json:"Identifiers"`
}

type simpleStorageDoc struct {
	Devices []struct {
		Name          string    `json:"Name"`
		Manufacturer  string    `json:"Manufacturer"`
		Model         string    `json:"Model"`
		CapacityBytes *int64    `json:"CapacityBytes"`
		Status        statusDoc `json:"Status"`
	} `json:"Devices"`
}

type ethernetDoc struct {
	ID                  string    `json:"Id"`
	Name                string    `json:"Name"`
	MACAddress          string    `json:"MACAddress"`
	PermanentMACAddress string    `json:"PermanentMACAddress"`
	LinkStatus          string    `json:"LinkStatus"`
	SpeedMbps           *float64  `json:"SpeedMbps"`
	Status              statusDoc `json:"Status"`
}

// inspection collects one reading's warnings; sub-reads run in parallel.
type inspection struct {
	b        *BMC
	c        *gofish.APIClient
	mu       sync.Mutex
	warnings []string
	// fatal is an answer that must end the reading so that do() acts on
	// it: a session the BMC forgot (401) or a refusal (403).
	fatal error
}

// get reads uri into v; a failure becomes a warning (what, the URL and
// the BMC's answer) and false.
func (in *inspection) get(what, uri string, v any) bool {
	err := getJSON(in.c, uri, v)
	if err == nil {
		return true
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if st := statusOf(err); st == http.StatusUnauthorized || st == http.StatusForbidden {
		if in.fatal == nil {
			in.fatal = err
		}
		return false
	}
	in.warnings = append(in.warnings, fmt.Sprintf("%s: %s", what, in.b.explain(err)))
	return false
}

func (in *inspection) warn(format string, args ...any) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.warnings = append(in.warnings, fmt.Sprintf(format, args...))
}

// parallel runs fns at once and waits for them all.
func parallel(fns ...func()) {
	var wg sync.WaitGroup
	for _, f := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	wg.Wait()
}

// members reads a collection and then each member (in parallel) with
// read, which gets the member's URI and its index.
func (in *inspection) members(what, uri string, read func(i int, uri string)) int {
	var col collectionDoc
	// With $expand the members come in the same answer; the read cache
	// of a read-only operation then answers their reads (cache.go).
	expanded := false
	if in.b.rt.canExpand() {
		sep := "?"
		if strings.Contains(uri, "?") {
			sep = "&"
		}
		err := getJSON(in.c, uri+sep+expandQuery, &col)
		switch st := statusOf(err); {
		case err == nil:
			expanded = true
		case st == http.StatusBadRequest || st == http.StatusNotImplemented || st == http.StatusMethodNotAllowed:
			in.b.rt.noExpand()
		}
	}
	if !expanded && !in.get(what, uri, &col) {
		return 0
	}
	if len(col.Members) > 256 {
		col.Members = col.Members[:256]
	}
	var fns []func()
	for i, m := range col.Members {
		if m.ID == "" {
			continue
		}
		fns = append(fns, func() { read(i, m.ID) })
	}
	parallel(fns...)
	return len(col.Members)
}

// InspectOOB implements drivers.Inspector.
func (b *BMC) InspectOOB(ctx context.Context) (drivers.OOBInventory, error) {
	ctx, cancel := reserve(reading(ctx))
	defer cancel()
	if err := b.lock(ctx); err != nil {
		return drivers.OOBInventory{}, err
	}
	defer b.unlock()
	var inv drivers.OOBInventory
	err := b.do(ctx, "inspect the system out of band", func(c *gofish.APIClient) error {
		uri, err := b.findSystem(c)
		if err != nil {
			return err
		}
		var sys inspectSystemDoc
		if err := getJSON(c, uri, &sys); err != nil {
			return err
		}
		in := &inspection{b: b, c: c}
		inv = in.read(uri, &sys)
		return in.fatal
	})
	return inv, err
}

func (in *inspection) read(uri string, sys *inspectSystemDoc) drivers.OOBInventory {
	inv := drivers.OOBInventory{
		SystemVendor: drivers.OOBSystemVendor{Manufacturer: sys.Manufacturer, ProductName: sys.Model, SerialNumber: sys.SerialNumber},
		Disks:        []drivers.OOBDisk{},
		Interfaces:   []drivers.OOBInterface{},
	}
	if g := sys.MemorySummary.TotalSystemMemoryGiB; g != nil && *g > 0 {
		inv.Memory.PhysicalMB = uint64(math.Floor(*g * 1024))
	} else {
		in.warn("memory: system %s%s gives no MemorySummary.TotalSystemMemoryGiB", in.b.cfg.endpoint, uri)
	}
	inv.Boot.CurrentBootMode = bootModeOf(sys.Boot.BootSourceOverrideMode)

	var procs []processorDoc
	var drives []inspectDriveDoc
	var storageSeen bool
	var vols []drivers.Volume
	var simple []drivers.OOBDisk
	var nics []ethernetDoc
	var pmu sync.Mutex
	parallel(
		func() {
			if sys.Processors.ID == "" {
				in.warn("cpu: system %s%s links no Processors; the count comes from ProcessorSummary", in.b.cfg.endpoint, uri)
				return
			}
			in.members("cpu", sys.Processors.ID, func(_ int, m string) {
				var p processorDoc
				if in.get("cpu", m, &p) {
					pmu.Lock()
					procs = append(procs, p)
					pmu.Unlock()
				}
			})
		},
		func() {
			if sys.Storage.ID == "" {
				return
			}
			storageSeen = true
			in.members("disks", sys.Storage.ID, func(_ int, m string) {
				s := &storageDoc{}
				if !in.get("disks", m, s) {
					return
				}
				var fns []func()
				for _, d := range s.Drives {
					fns = append(fns, func() {
						var dd inspectDriveDoc
						var rd driveDoc
						if !in.get("disks", d.ID, &dd) {
							return
						}
						rd = driveDoc{ODataID: d.ID, ID: dd.ID}
						pmu.Lock()
						drives = append(drives, dd)
						s.drives = append(s.drives, rd)
						pmu.Unlock()
					})
				}
				if s.Volumes.ID != "" {
					fns = append(fns, func() {
						in.members("raid volumes", s.Volumes.ID, func(_ int, v string) {
							var vd volumeDoc
							if in.get("raid volumes", v, &vd) {
								pmu.Lock()
								s.volumes = append(s.volumes, vd)
								pmu.Unlock()
							}
						})
					})
				}
				parallel(fns...)
				pmu.Lock()
				for _, v := range s.volumes {
					vols = append(vols, s.volume(v))
				}
				pmu.Unlock()
			})
		},
		func() {
			if sys.SimpleStorage.ID == "" {
				return
			}
			in.members("disks", sys.SimpleStorage.ID, func(_ int, m string) {
				var ss simpleStorageDoc
				if !in.get("disks", m, &ss) {
					return
				}
				pmu.Lock()
				defer pmu.Unlock()
				for _, d := range ss.Devices {
					if d.CapacityBytes == nil || !enabled(d.Status.State) {
						continue
					}
					simple = append(simple, drivers.OOBDisk{Name: d.Name, Size: uint64(max(*d.CapacityBytes, 0)), Model: d.Model, Vendor: d.Manufacturer})
				}
			})
		},
		func() {
			if sys.EthernetInterfaces.ID == "" {
				in.warn("interfaces: system %s%s links no EthernetInterfaces: no MACs to create ports from", in.b.cfg.endpoint, uri)
				return
			}
			in.members("interfaces", sys.EthernetInterfaces.ID, func(_ int, m string) {
				var e ethernetDoc
				if in.get("interfaces", m, &e) {
					pmu.Lock()
					nics = append(nics, e)
					pmu.Unlock()
				}
			})
		},
		func() {
			if sys.SecureBoot.ID == "" {
				return
			}
			var sb struct {
				SecureBootEnable *bool `json:"SecureBootEnable"`
			}
			if in.get("secure boot", sys.SecureBoot.ID, &sb) {
				inv.Boot.SecureBoot = sb.SecureBootEnable
			}
		},
		func() {
			if inv.Boot.CurrentBootMode != "" || sys.Bios.ID == "" {
				return
			}
			// No BootSourceOverrideMode: the BIOS attributes name the
			// mode on Dell (BootMode), HPE (BootMode) and Lenovo
			// (BootModes_SystemBootMode) systems.
			var bios struct {
				Attributes map[string]any `json:"Attributes"`
			}
			if !in.get("boot mode", sys.Bios.ID, &bios) {
				return
			}
			for _, k := range []string{"BootMode", "BootModes_SystemBootMode", "BootModes.SystemBootMode"} {
				if s, ok := bios.Attributes[k].(string); ok && inv.Boot.CurrentBootMode == "" {
					inv.Boot.CurrentBootMode = bootModeOf(s)
				}
			}
		},
	)

	// Processors: Ironic's count is the sum of TotalThreads; empty
	// sockets and processors that are not CPUs (GPUs, FPGAs) do not count.
	threads, cores, sockets := 0, 0, 0
	sawThreads := false
	for _, p := range procs {
		if p.Status.State == "Absent" || (p.ProcessorType != "" && p.ProcessorType != "CPU") {
			continue
		}
		sockets++
		if p.TotalThreads != nil {
			threads += *p.TotalThreads
			sawThreads = true
		}
		if p.TotalCores != nil {
			cores += *p.TotalCores
		}
		if inv.CPU.ModelName == "" {
			inv.CPU.ModelName = strings.TrimSpace(p.Model)
		}
		if inv.CPU.Architecture == "" {
			inv.CPU.Architecture = CPUArch(p.InstructionSet, p.ProcessorArchitecture)
			if inv.CPU.Architecture == "" && (p.InstructionSet != "" || p.ProcessorArchitecture != "") {
				in.warn("cpu: unknown architecture (InstructionSet %q, ProcessorArchitecture %q)", p.InstructionSet, p.ProcessorArchitecture)
			}
		}
	}
	ps := sys.ProcessorSummary
	switch {
	case sawThreads && threads > 0:
		inv.CPU.Count = threads
	case ps.LogicalProcessorCount != nil && *ps.LogicalProcessorCount > 0:
		inv.CPU.Count = *ps.LogicalProcessorCount
	case cores > 0:
		inv.CPU.Count = cores
	case ps.Count != nil:
		inv.CPU.Count = *ps.Count
	}
	if inv.CPU.Count == 0 {
		in.warn("cpu: system %s%s gives no processor count (Processors' TotalThreads, ProcessorSummary)", in.b.cfg.endpoint, uri)
	}
	inv.CPU.Cores = cores
	inv.CPU.Sockets = sockets
	if sockets == 0 && ps.Count != nil {
		inv.CPU.Sockets = *ps.Count
	}
	if inv.CPU.ModelName == "" {
		inv.CPU.ModelName = strings.TrimSpace(ps.Model)
	}

	for _, d := range drives {
		if d.CapacityBytes == nil || d.Status.State == "Absent" {
			continue
		}
		disk := drivers.OOBDisk{Name: d.Name, Size: uint64(max(*d.CapacityBytes, 0)), Serial: d.SerialNumber, Model: d.Model, Vendor: d.Manufacturer,
			Rotational: d.MediaType == "HDD" || d.RotationSpeedRPM != nil && *d.RotationSpeedRPM > 0}
		if disk.Name == "" {
			disk.Name = d.ID
		}
		for _, id := range d.Identifiers {
			if id.DurableName != "" && disk.WWN == "" && id.DurableNameFormat != "UUID" {
				disk.WWN = id.DurableName
			}
		}
		inv.Disks = append(inv.Disks, disk)
	}
	// SimpleStorage describes the same drives on BMCs that have both: a
	// device is added unless a Storage drive of its size (and model,
	// when both name one) stands for it already.
	used := make([]bool, len(inv.Disks))
	var extra []drivers.OOBDisk
	for _, sd := range simple {
		dup := false
		for i, d := range inv.Disks {
			if !used[i] && d.Size == sd.Size && (d.Model == "" || sd.Model == "" || strings.EqualFold(strings.TrimSpace(d.Model), strings.TrimSpace(sd.Model))) {
				used[i], dup = true, true
				break
			}
		}
		if !dup {
			extra = append(extra, sd)
		}
	}
	inv.Disks = append(inv.Disks, extra...)
	if len(inv.Disks) == 0 && !storageSeen && sys.SimpleStorage.ID == "" {
		in.warn("disks: system %s%s links neither Storage nor SimpleStorage", in.b.cfg.endpoint, uri)
	}
	sort.SliceStable(inv.Disks, func(i, j int) bool { return inv.Disks[i].Name < inv.Disks[j].Name })
	sort.Slice(vols, func(i, j int) bool { return vols[i].Controller+"/"+vols[i].ID < vols[j].Controller+"/"+vols[j].ID })
	inv.RAIDVolumes = vols

	for _, e := range nics {
		mac := e.MACAddress
		if mac == "" {
			mac = e.PermanentMACAddress
		}
		if mac == "" {
			continue
		}
		nic := drivers.OOBInterface{Name: e.ID, MACAddress: strings.ToLower(mac), HasCarrier: e.LinkStatus == "LinkUp", Enabled: enabled(e.Status.State)}
		if e.SpeedMbps != nil {
			nic.SpeedMbps = int(*e.SpeedMbps)
		}
		inv.Interfaces = append(inv.Interfaces, nic)
	}
	sort.Slice(inv.Interfaces, func(i, j int) bool { return inv.Interfaces[i].Name < inv.Interfaces[j].Name })
	// A VLAN or a second function of the same port repeats its MAC: one
	// port per MAC, the first by name (an enabled one before others).
	seen := map[string]int{}
	var nics2 []drivers.OOBInterface
	for _, n := range inv.Interfaces {
		if i, ok := seen[n.MACAddress]; ok {
			if !nics2[i].Enabled && n.Enabled {
				nics2[i] = n
			}
			continue
		}
		seen[n.MACAddress] = len(nics2)
		nics2 = append(nics2, n)
	}
	inv.Interfaces = append([]drivers.OOBInterface{}, nics2...)

	sort.Strings(in.warnings)
	inv.Warnings = in.warnings
	return inv
}

// enabled: a Status.State that does not say the device is off or absent
// (Ironic makes ports only of enabled interfaces; a BMC that gives no
// state is taken at its word).
func enabled(state string) bool { return state == "" || state == "Enabled" }

// bootModeOf maps Redfish's and the BIOS attributes' names of a boot
// mode to uefi or bios.
func bootModeOf(s string) string {
	switch strings.ToLower(s) {
	case "uefi", "uefimode", "uefi mode":
		return ModeUEFI
	case "legacy", "bios", "legacybios", "legacymode", "legacy mode":
		return ModeBIOS
	}
	return ""
}
