// Package roothints holds Ironic's root_device hints (node properties)
// and the one rule that picks a root disk by them, for the ramdisk (the
// disk a deploy overwrites, ramdisk/image.SelectRoot) and the edge
// agent's out-of-band inspection (local_gb from the disks a BMC
// reports, agent/bmc): the two programs may not import each other, so
// the rule lives here. It only parses and compares: no I/O.
package roothints

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// MinRootBytes is the smallest disk chosen as root when there are no
// hints, as in Ironic's agent: smaller devices are usually USB sticks or
// firmware partitions.
const MinRootBytes = 4 << 30

const gib = 1 << 30

// Hints are Ironic's root_device hints. Every non-empty hint must
// match. Values may carry an operator, as in Ironic: size (GiB, integer)
// takes "==", "!=", ">=", "<=", ">", "<" or "<or> A <or> B" (a bare
// number means "=="); string hints take "s==", "s!=", "s>=", "s<=",
// "s>", "s<", "<in>" (substring) or "<or> A <or> B" (a bare string means
// "s=="). String comparisons ignore case. A name without "/dev/" gets it
// prepended.
type Hints struct {
	Size       string `json:"size,omitempty"`
	Name       string `json:"name,omitempty"`
	Serial     string `json:"serial,omitempty"`
	WWN        string `json:"wwn,omitempty"`
	Model      string `json:"model,omitempty"`
	Vendor     string `json:"vendor,omitempty"`
	Rotational *bool  `json:"rotational,omitempty"`
}

// UnmarshalJSON accepts Ironic's root_device JSON, where size may be a
// number or a string and rotational a boolean or a string. Hints these
// rules cannot evaluate (hctl, by_path, wwn_with_extension,
// wwn_vendor_extension) are errors, not ignored: ignoring one could pick,
// and overwrite, the wrong disk.
func (h *Hints) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("root device hints are not a JSON object: %w", err)
	}
	var out Hints
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

// FromValue reads hints from a decoded JSON value (a step's or a node's
// root_device: a map[string]any); nil is no hints.
func FromValue(v any) (Hints, error) {
	var h Hints
	if v == nil {
		return h, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return h, fmt.Errorf("root device hints are not a JSON object: %w", err)
	}
	err = json.Unmarshal(b, &h)
	return h, err
}

// IsZero reports whether no hint is set.
func (h Hints) IsZero() bool {
	return h == Hints{}
}

// Validate checks that every hint parses.
func (h Hints) Validate() error {
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

func (h Hints) strings() map[string]string {
	return map[string]string{"name": h.Name, "serial": h.Serial, "wwn": h.WWN, "model": h.Model, "vendor": h.Vendor}
}

func (h Hints) String() string {
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

// Disk is what the rule reads of a disk.
type Disk struct {
	// Name is the kernel's name ("sda"; "/dev/sda" is taken as well).
	Name       string
	SizeBytes  uint64
	Rotational bool
	Serial     string
	WWN        string
	Model      string
	Vendor     string
	// Protected says why the disk is never chosen (read-only, virtual
	// media...), "" when it may be.
	Protected string
}

func (d Disk) String() string {
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

// Words are how a caller names the disks in Select's error.
type Words struct {
	// Floor is what there is none of without hints (before " of at
	// least 4 GiB"): "no writable, fixed, non-virtual disk".
	Floor string
	// NoMatch is what there is none of with hints (before the hints):
	// "no device matches root device hints".
	NoMatch string
	// Seen introduces the disks passed over: "devices seen".
	Seen string
	// None says that there were no disks at all, and what to do.
	None string
}

// Select chooses the root disk: with no hints the smallest disk of at
// least MinRootBytes; with hints the first disk, in the order given,
// that matches them all, as Ironic's agent does. A protected disk is
// never chosen. It returns the chosen disk's index in disks; its error
// (a hint that does not parse, or no disk chosen) lists every disk and
// why it was passed over, in the caller's words.
func Select(disks []Disk, h Hints, w Words) (int, error) {
	if err := h.Validate(); err != nil {
		return -1, err
	}
	var candidates []int
	var rejected []string
	for i, d := range disks {
		why, err := Reject(d, h)
		if err != nil {
			return -1, err
		}
		if why != "" {
			rejected = append(rejected, d.String()+": "+why)
			continue
		}
		candidates = append(candidates, i)
	}
	if len(candidates) == 0 {
		what := fmt.Sprintf("%s %s", w.NoMatch, h)
		if h.IsZero() {
			what = fmt.Sprintf("%s of at least %d GiB", w.Floor, MinRootBytes/gib)
		}
		if len(rejected) == 0 {
			return -1, fmt.Errorf("%s: %s", what, w.None)
		}
		return -1, fmt.Errorf("%s; %s: %s; fix the hints or the hardware", what, w.Seen, strings.Join(rejected, "; "))
	}
	if h.IsZero() {
		sort.SliceStable(candidates, func(i, j int) bool { return disks[candidates[i]].SizeBytes < disks[candidates[j]].SizeBytes })
	}
	return candidates[0], nil
}

// Reject says why d is not a root candidate under h, or "".
func Reject(d Disk, h Hints) (string, error) {
	if d.Protected != "" {
		return d.Protected, nil
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
	if h.Rotational != nil && *h.Rotational != d.Rotational {
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
