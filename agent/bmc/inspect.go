package bmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/bmedge/bmedge/drivers"
)

// Out-of-band inspection (inspect_interface redfish): the step
// inspect.inspect_hardware reads the system from its BMC
// (drivers.Inspector) and leaves in the result what the ramdisk's
// deploy.inspect_hardware leaves: the inventory (the ramdisk's shape,
// IPA's names) and the properties cpus, memory_mb, local_gb and
// cpu_arch, the root disk chosen as the ramdisk chooses it (the node's
// root_device hints, else the smallest disk of at least 4 GiB); besides,
// the capabilities' boot_mode and plugin data that names the inspection
// and what it could not read, and the firmware and BIOS readings. Each warning of a partial reading also
// goes to the node's history (drivers.Warn). No power action, no media.

// minRootBytes is the ramdisk's: the smallest disk taken as root when
// there are no hints (ramdisk/image.MinRootBytes).
const minRootBytes = 4 << 30

// maxOOBItems bounds the disks and the interfaces an inspection reports.
const maxOOBItems = 256

func (set *Set) inspectOOB(ctx context.Context, node string, b drivers.BMC, args map[string]any) error {
	ib, ok := b.(drivers.Inspector)
	if !ok {
		return errors.New("this node's BMC driver cannot inspect out of band; set the node's inspect_interface to agent (the ramdisk reads the hardware)")
	}
	hints, err := parseHints(args["root_device"])
	if err != nil {
		return fmt.Errorf("properties/root_device: %w", err)
	}
	inv, err := ib.InspectOOB(ctx)
	if err != nil {
		return err
	}
	for _, w := range inv.Warnings {
		drivers.Warn(ctx, "out-of-band inspection: "+w)
	}
	props := map[string]any{}
	if inv.CPU.Count > 0 {
		props["cpus"] = inv.CPU.Count
	}
	if inv.Memory.PhysicalMB > 0 {
		props["memory_mb"] = inv.Memory.PhysicalMB
	}
	if inv.CPU.Architecture != "" {
		props["cpu_arch"] = inv.CPU.Architecture
	}
	root, err := selectRoot(inv.Disks, hints)
	switch {
	case err != nil && !hints.zero():
		return fmt.Errorf("cannot compute local_gb: %w", err)
	case err != nil:
		props["local_gb"] = 0 // diskless, as Ironic's inspection takes it
	default:
		props["local_gb"] = root.Size >> 30
	}
	out := inv
	out.Warnings = nil
	// Bounded, as every result is (a BMC that lists thousands of drives
	// would not make a message the protocol takes).
	out.Disks = out.Disks[:min(len(out.Disks), maxOOBItems)]
	out.Interfaces = out.Interfaces[:min(len(out.Interfaces), maxOOBItems)]
	putData(ctx, "inventory", out)
	putData(ctx, "properties", props)
	if len(inv.RAIDVolumes) > 0 {
		// The volumes the system has now (existing before enrollment,
		// say): the node's raid_config when its raid_interface is the
		// BMC's (the coordinator decides).
		putData(ctx, "raid_config", map[string]any{"logical_disks": inv.RAIDVolumes[:min(len(inv.RAIDVolumes), drivers.MaxRAIDVolumes)]})
	}
	if inv.Boot.CurrentBootMode != "" {
		putData(ctx, "capabilities", map[string]any{"boot_mode": inv.Boot.CurrentBootMode})
	}
	set.mu.Lock()
	iface := set.kind[node]
	set.mu.Unlock()
	pd := map[string]any{"inspect_interface": iface, "source": "bmc"}
	if e, ok := b.(interface{ Endpoint() string }); ok {
		pd["bmc"] = e.Endpoint()
	}
	if root.Name != "" {
		pd["root_disk"] = root.Name
	}
	if len(inv.Warnings) > 0 {
		pd["warnings"] = inv.Warnings
	}
	putData(ctx, "plugin_data", pd)
	// As the agent inspection's boot does (and Ironic at inspection):
	// the firmware versions and BIOS settings are read again.
	set.readHardware(ctx, node, b)
	set.log.Info("out-of-band inspection done", "node", node, "cpus", inv.CPU.Count, "memory_mb", inv.Memory.PhysicalMB,
		"disks", len(inv.Disks), "interfaces", len(inv.Interfaces), "warnings", len(inv.Warnings))
	return nil
}

// rootHints are Ironic's root_device hints, with the ramdisk's rules
// (ramdisk/image.RootDeviceHints: the edge agent may not import the
// ramdisk's packages, so the rules are restated here and the two are
// tested on the same cases): size in GiB with ==, !=, >=, <=, >, < or
// <or>; string hints with s==, s!=, s>=, s<=, s>, s<, <in> or <or>,
// ignoring case; rotational a boolean. Hints the BMC cannot give
// (hctl, by_path, wwn extensions) are errors, never ignored.
type rootHints struct {
	size, name, serial, wwn, model, vendor string
	rotational                             *bool
}

func (h rootHints) zero() bool {
	return h.size == "" && h.name == "" && h.serial == "" && h.wwn == "" && h.model == "" && h.vendor == "" && h.rotational == nil
}

func parseHints(v any) (rootHints, error) {
	var h rootHints
	if v == nil {
		return h, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return h, errors.New("root device hints are not a JSON object")
	}
	for k, x := range m {
		s, isStr := x.(string)
		if !isStr {
			b, _ := json.Marshal(x)
			s = strings.TrimSpace(string(b))
		}
		switch k {
		case "size":
			h.size = s
		case "name":
			h.name = s
		case "serial":
			h.serial = s
		case "wwn":
			h.wwn = s
		case "model":
			h.model = s
		case "vendor":
			h.vendor = s
		case "rotational":
			r, err := parseBool(s)
			if err != nil {
				return h, fmt.Errorf("root device hint rotational: %w", err)
			}
			h.rotational = &r
		default:
			return h, fmt.Errorf("root device hint %q is not supported; supported hints: size, name, serial, wwn, model, vendor, rotational", k)
		}
	}
	if h.size != "" {
		if _, err := matchInt(h.size, 0); err != nil {
			return h, err
		}
	}
	for name, v := range h.strings() {
		if v != "" {
			if _, err := matchString(name, v, "x"); err != nil {
				return h, err
			}
		}
	}
	return h, nil
}

func (h rootHints) strings() map[string]string {
	return map[string]string{"name": h.name, "serial": h.serial, "wwn": h.wwn, "model": h.model, "vendor": h.vendor}
}

// selectRoot chooses the root disk as the ramdisk does: with no hints the
// smallest disk of at least 4 GiB, else the first (by name) that matches
// every hint.
func selectRoot(disks []drivers.OOBDisk, h rootHints) (drivers.OOBDisk, error) {
	sorted := append([]drivers.OOBDisk(nil), disks...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var cands []drivers.OOBDisk
	var rejected []string
	for _, d := range sorted {
		why, err := rejectReason(d, h)
		if err != nil {
			return drivers.OOBDisk{}, err
		}
		if why != "" {
			rejected = append(rejected, fmt.Sprintf("%s (%d GiB): %s", d.Name, d.Size>>30, why))
			continue
		}
		cands = append(cands, d)
	}
	if len(cands) == 0 {
		what := "no disk of at least 4 GiB"
		if !h.zero() {
			what = "no disk matches the root device hints"
		}
		if len(rejected) == 0 {
			return drivers.OOBDisk{}, fmt.Errorf("%s: the BMC reports no disks", what)
		}
		return drivers.OOBDisk{}, fmt.Errorf("%s; disks the BMC reports: %s; fix the hints or the hardware", what, strings.Join(rejected, "; "))
	}
	if h.zero() {
		sort.SliceStable(cands, func(i, j int) bool { return cands[i].Size < cands[j].Size })
	}
	return cands[0], nil
}

func rejectReason(d drivers.OOBDisk, h rootHints) (string, error) {
	if h.zero() {
		if d.Size < minRootBytes {
			return "smaller than 4 GiB", nil
		}
		return "", nil
	}
	if h.size != "" {
		ok, err := matchInt(h.size, int64(d.Size>>30))
		if err != nil {
			return "", err
		}
		if !ok {
			return "size " + h.size + " does not match", nil
		}
	}
	name := d.Name
	if !strings.HasPrefix(name, "/dev/") {
		name = "/dev/" + name
	}
	values := map[string]string{"name": name, "serial": d.Serial, "wwn": d.WWN, "model": d.Model, "vendor": d.Vendor}
	for _, k := range []string{"name", "serial", "wwn", "model", "vendor"} {
		hint := h.strings()[k]
		if hint == "" {
			continue
		}
		if values[k] == "" {
			return k + " unknown", nil
		}
		ok, err := matchString(k, hint, values[k])
		if err != nil {
			return "", err
		}
		if !ok {
			return k + " " + hint + " does not match", nil
		}
	}
	if h.rotational != nil && *h.rotational != d.Rotational {
		return fmt.Sprintf("rotational is %v", d.Rotational), nil
	}
	return "", nil
}

// matchInt evaluates an integer hint expression against v.
func matchInt(expr string, v int64) (bool, error) {
	e := strings.TrimSpace(expr)
	bad := func() (bool, error) {
		return false, fmt.Errorf("root device hint size %q is not a positive integer with an optional operator (==, !=, >=, <=, >, <, <or>); e.g. \">= 100\"", expr)
	}
	if strings.HasPrefix(e, "<or>") {
		found := false
		for _, part := range strings.Split(e, "<or>")[1:] {
			n, err := strconv.ParseInt(strings.TrimSpace(part), 10, 64)
			if err != nil || n <= 0 {
				return bad()
			}
			found = found || n == v
		}
		return found, nil
	}
	op := "=="
	for _, o := range []string{"==", "!=", ">=", "<=", ">", "<"} {
		if rest, ok := strings.CutPrefix(e, o); ok {
			op, e = o, strings.TrimSpace(rest)
			break
		}
	}
	n, err := strconv.ParseInt(e, 10, 64)
	if err != nil || n <= 0 {
		return bad()
	}
	switch op {
	case "==":
		return v == n, nil
	case "!=":
		return v != n, nil
	case ">=":
		return v >= n, nil
	case "<=":
		return v <= n, nil
	case ">":
		return v > n, nil
	default:
		return v < n, nil
	}
}

// matchString evaluates a string hint expression against v, ignoring case.
func matchString(name, expr, v string) (bool, error) {
	e := strings.ToLower(strings.TrimSpace(expr))
	v = strings.ToLower(strings.TrimSpace(v))
	norm := func(s string) string {
		s = strings.TrimSpace(s)
		if name == "name" && !strings.HasPrefix(s, "/dev/") {
			s = "/dev/" + s
		}
		return s
	}
	if e == "" {
		return false, fmt.Errorf("root device hint %s is empty", name)
	}
	if strings.HasPrefix(e, "<or>") {
		for _, part := range strings.Split(e, "<or>")[1:] {
			if norm(part) == v {
				return true, nil
			}
		}
		return false, nil
	}
	if rest, ok := strings.CutPrefix(e, "<in>"); ok {
		return strings.Contains(v, strings.TrimSpace(rest)), nil
	}
	for _, o := range []string{"s==", "s!=", "s>=", "s<=", "s>", "s<"} {
		rest, ok := strings.CutPrefix(e, o)
		if !ok {
			continue
		}
		w := norm(rest)
		switch o {
		case "s==":
			return v == w, nil
		case "s!=":
			return v != w, nil
		case "s>=":
			return v >= w, nil
		case "s<=":
			return v <= w, nil
		case "s>":
			return v > w, nil
		default:
			return v < w, nil
		}
	}
	if strings.HasPrefix(e, "<") && strings.Contains(e, ">") {
		return false, fmt.Errorf("root device hint %s=%q uses an unsupported operator; use s==, s!=, s>=, s<=, s>, s<, <in> or <or>", name, expr)
	}
	return v == norm(e), nil
}

// parseBool accepts the spellings oslo's strict bool_from_string does.
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, nil
	case "0", "f", "false", "off", "n", "no":
		return false, nil
	}
	return false, fmt.Errorf("%q is not a boolean (use true or false)", s)
}
