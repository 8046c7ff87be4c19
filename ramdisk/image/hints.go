package image

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/bmedge/bmedge/ramdisk/disk"
)

// MinRootBytes is the smallest disk chosen as root when there are no
// hints, as in Ironic's agent: smaller devices are usually USB sticks or
// firmware partitions.
const MinRootBytes = 4 << 30

const gib = 1 << 30

// RootDeviceHints are Ironic's root_device hints (node properties). Every
// non-empty hint must match. Values may carry an operator, as in Ironic:
// size (GiB, integer) takes "==", "!=", ">=", "<=", ">", "<" or
// "<or> A <or> B" (a bare number means "=="); string hints take "s==",
// "s!=", "s>=", "s<=", "s>", "s<", "<in>" (substring) or "<or> A <or> B"
// (a bare string means "s=="). String comparisons ignore case. A name
// without "/dev/" gets it prepended.
type RootDeviceHints struct {
	Size       string `json:"size,omitempty"`
	Name       string `json:"name,omitempty"`
	Serial     string `json:"serial,omitempty"`
	WWN        string `json:"wwn,omitempty"`
	Model      string `json:"model,omitempty"`
	Vendor     string `json:"vendor,omitempty"`
	Rotational *bool  `json:"rotational,omitempty"`
}

// UnmarshalJSON accepts Ironic's root_device JSON, where size may be a
// number or a string and rotational a boolean or a string. Hints this
// agent cannot evaluate (hctl, by_path, wwn_with_extension,
// wwn_vendor_extension) are errors, not ignored: ignoring one could pick,
// and overwrite, the wrong disk.
func (h *RootDeviceHints) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("root device hints are not a JSON object: %w", err)
	}
	var out RootDeviceHints
	for k, v := range raw {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			// Not a string: a number (size) or a boolean (rotational).
			s = strings.TrimSpace(string(v))
		}
		switch k {
		case "size":
			out.Size = s
		case "name":
			out.Name = s
		case "serial":
			out.Serial = s
		case "wwn":
			out.WWN = s
		case "model":
			out.Model = s
		case "vendor":
			out.Vendor = s
		case "rotational":
			r, err := parseBool(s)
			if err != nil {
				return fmt.Errorf("root device hint rotational: %w", err)
			}
			out.Rotational = &r
		default:
			return fmt.Errorf("root device hint %q is not supported; supported hints: size, name, serial, wwn, model, vendor, rotational", k)
		}
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*h = out
	return nil
}

// IsZero reports whether no hint is set.
func (h RootDeviceHints) IsZero() bool {
	return h == RootDeviceHints{}
}

// Validate checks that every hint parses.
func (h RootDeviceHints) Validate() error {
	if h.Size != "" {
		if _, err := matchInt(h.Size, 0); err != nil {
			return err
		}
	}
	for name, v := range h.strings() {
		if v != "" {
			if _, err := matchString(name, v, "x"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (h RootDeviceHints) strings() map[string]string {
	return map[string]string{"name": h.Name, "serial": h.Serial, "wwn": h.WWN, "model": h.Model, "vendor": h.Vendor}
}

func (h RootDeviceHints) String() string {
	var parts []string
	if h.Size != "" {
		parts = append(parts, "size="+h.Size)
	}
	for _, k := range []string{"name", "serial", "wwn", "model", "vendor"} {
		if v := h.strings()[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if h.Rotational != nil {
		parts = append(parts, "rotational="+strconv.FormatBool(*h.Rotational))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// SelectRoot chooses the device to write the image to. With no hints it is
// the smallest disk of at least MinRootBytes; with hints it is the first
// device, in the order given (disk.List sorts by name), that matches them
// all, as Ironic's agent does. Protected devices (disk.Device.Protected:
// read-only, virtual media, removable, the boot parameters medium) are
// never chosen. The error lists every device and why it was passed over.
func SelectRoot(devs []disk.Device, hints RootDeviceHints) (disk.Device, error) {
	if err := hints.Validate(); err != nil {
		return disk.Device{}, err
	}
	var candidates []disk.Device
	var rejected []string
	for _, d := range devs {
		why, err := rejectReason(d, hints)
		if err != nil {
			return disk.Device{}, err
		}
		if why != "" {
			rejected = append(rejected, describe(d)+": "+why)
			continue
		}
		candidates = append(candidates, d)
	}
	if len(candidates) == 0 {
		what := fmt.Sprintf("no device matches root device hints %s", hints)
		if hints.IsZero() {
			what = fmt.Sprintf("no writable, fixed, non-virtual disk of at least %d GiB", MinRootBytes/gib)
		}
		if len(rejected) == 0 {
			return disk.Device{}, fmt.Errorf("%s: no block devices were found; check that the disk driver is loaded", what)
		}
		return disk.Device{}, fmt.Errorf("%s; devices seen: %s; fix the hints or the hardware", what, strings.Join(rejected, "; "))
	}
	if hints.IsZero() {
		sort.SliceStable(candidates, func(i, j int) bool { return candidates[i].SizeBytes < candidates[j].SizeBytes })
	}
	return candidates[0], nil
}

// rejectReason says why d is not a root candidate under hints, or "".
func rejectReason(d disk.Device, h RootDeviceHints) (string, error) {
	if why := d.Protected(); why != "" {
		return why, nil
	}
	if h.IsZero() {
		if d.SizeBytes < MinRootBytes {
			return fmt.Sprintf("smaller than %d GiB", MinRootBytes/gib), nil
		}
		return "", nil
	}
	if h.Size != "" {
		ok, err := matchInt(h.Size, int64(d.SizeBytes/gib))
		if err != nil {
			return "", err
		}
		if !ok {
			return "size " + h.Size + " does not match", nil
		}
	}
	values := map[string]string{"name": "/dev/" + d.Name, "serial": d.Serial, "wwn": d.WWN, "model": d.Model, "vendor": d.Vendor}
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
	if h.Rotational != nil && *h.Rotational != d.Rotational {
		return fmt.Sprintf("rotational is %v", d.Rotational), nil
	}
	return "", nil
}

func describe(d disk.Device) string {
	s := fmt.Sprintf("%s (%d GiB", d.Name, d.SizeBytes/gib)
	if d.Serial != "" {
		s += ", serial " + d.Serial
	}
	if d.WWN != "" {
		s += ", wwn " + d.WWN
	}
	if d.Model != "" {
		s += ", model " + d.Model
	}
	return s + ")"
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
