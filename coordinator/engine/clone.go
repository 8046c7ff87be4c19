package engine

import (
	"encoding/json"
	"math"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// clone is a deep copy of n, as a round trip through JSON would make it
// (that is how it was made before, and what callers may rely on: maps
// hold only JSON's types, times carry no monotonic reading, an empty
// map or list that JSON leaves out comes back nil). The ramdisk's step
// lists are never changed in place (stepcat.go): the copy shares them.
// A node at rest, with JSON's types in its maps, is copied directly
// (cloneDirect), which gives the same copy as the round trip at a small
// part of its cost (TestCloneDirectMatchesJSON); any other node goes
// through JSON.
func clone(n *fsm.Node) *fsm.Node {
	if c, ok := cloneDirect(n); ok {
		return c
	}
	return cloneJSON(n)
}

// cloneJSON is clone through a JSON round trip.
func cloneJSON(n *fsm.Node) *fsm.Node {
	s := *n
	s.CachedCleanSteps, s.CachedDeploySteps = nil, nil
	b, _ := json.Marshal(&s)
	var c fsm.Node
	_ = json.Unmarshal(b, &c)
	c.CachedCleanSteps, c.CachedDeploySteps = n.CachedCleanSteps, n.CachedDeploySteps
	return &c
}

// nodeStrings are the indexes of fsm.Node's string fields (every one
// must be valid UTF-8 for the direct copy to equal JSON's, which
// replaces invalid bytes).
var nodeStrings = func() []int {
	var idx []int
	t := reflect.TypeFor[fsm.Node]()
	for i := range t.NumField() {
		if t.Field(i).Type.Kind() == reflect.String {
			idx = append(idx, i)
		}
	}
	return idx
}()

// cloneDirect copies n without JSON when it can give exactly what
// cloneJSON gives; ok is false when it cannot (n has an operation, a
// pending or held message, a value of another type than JSON's in a
// map, a string that is not UTF-8, a time JSON would change).
func cloneDirect(n *fsm.Node) (c *fsm.Node, ok bool) {
	if n.Op != nil || n.Pending != nil || n.Held != nil {
		return nil, false
	}
	v := reflect.ValueOf(n).Elem()
	for _, i := range nodeStrings {
		if !utf8.ValidString(v.Field(i).String()) {
			return nil, false
		}
	}
	cp := *n
	c = &cp
	ok = true
	maps := func(m *map[string]any) {
		if ok {
			*m, ok = copyObject(*m, true)
		}
	}
	maps(&c.DriverInfo)
	maps(&c.Properties)
	maps(&c.InstanceInfo)
	maps(&c.Extra)
	maps(&c.NetworkData)
	maps(&c.TargetRaidConfig)
	maps(&c.RaidConfig)
	if !ok {
		return nil, false
	}
	c.VMediaAttached, ok = copyStrings(n.VMediaAttached)
	if !ok {
		return nil, false
	}
	if len(n.VirtualMedia) == 0 {
		c.VirtualMedia = nil
	} else {
		c.VirtualMedia = make([]map[string]any, len(n.VirtualMedia))
		for i, m := range n.VirtualMedia {
			if c.VirtualMedia[i], ok = copyObject(m, false); !ok {
				return nil, false
			}
		}
	}
	if c.Traits, ok = copyStrings(n.Traits); !ok {
		return nil, false
	}
	if c.PastBoots, ok = copyStrings(n.PastBoots); !ok {
		return nil, false
	}
	c.AutomatedClean, c.SecureBoot = copyPtr(n.AutomatedClean), copyPtr(n.SecureBoot)
	for _, s := range []**fsm.StepRun{&c.CleanStep, &c.DeployStep, &c.ServiceStep} {
		if *s == nil {
			continue
		}
		r := **s
		if !utf8.ValidString(r.Interface) || !utf8.ValidString(r.Step) || !utf8.ValidString(r.Detail) || math.IsNaN(r.Progress) || math.IsInf(r.Progress, 0) {
			return nil, false
		}
		if r.Args, ok = copyObject(r.Args, false); !ok {
			return nil, false
		}
		*s = &r
	}
	if p := n.PlanStop; p != nil {
		if !utf8.ValidString(p.ID) || !utf8.ValidString(p.Mode) {
			return nil, false
		}
		c.PlanStop = copyPtr(p)
	}
	for _, t := range []*time.Time{&c.CreatedAt, &c.UpdatedAt, &c.ProvisionUpdatedAt, &c.Deadline, &c.LastHeartbeat,
		&c.FastTrackUntil, &c.StepsCachedAt, &c.PowerReadAt, &c.HealthReadAt} {
		if *t, ok = jsonTime(*t); !ok {
			return nil, false
		}
	}
	for _, p := range []**time.Time{&c.InspectionStartedAt, &c.InspectionFinishedAt} {
		if *p == nil {
			continue
		}
		t, good := jsonTime(**p)
		if !good {
			return nil, false
		}
		*p = &t
	}
	return c, true
}

// jsonTime is t as JSON gives it back: no monotonic reading, and UTC
// for a time at offset 0 (JSON writes it with Z). A time at another
// offset, or that JSON cannot write (a year outside 0–9999), is not
// handled (ok false): JSON would give it another location.
func jsonTime(t time.Time) (time.Time, bool) {
	if t.IsZero() {
		return time.Time{}, true
	}
	if _, off := t.Zone(); off != 0 {
		return t, false
	}
	if y := t.Year(); y < 0 || y > 9999 {
		return t, false
	}
	return t.UTC().Round(0), true
}

// copyStrings copies a list that JSON leaves out when empty.
func copyStrings(s []string) ([]string, bool) {
	if len(s) == 0 {
		return nil, true
	}
	for _, x := range s {
		if !utf8.ValidString(x) {
			return nil, false
		}
	}
	return append([]string(nil), s...), true
}

// copyObject deep-copies a map of JSON's types as a JSON round trip
// would: omitEmpty for a field that JSON leaves out when empty (it
// comes back nil), else nil stays nil and empty stays empty.
func copyObject(m map[string]any, omitEmpty bool) (map[string]any, bool) {
	if m == nil || (omitEmpty && len(m) == 0) {
		return nil, true
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if !utf8.ValidString(k) {
			return nil, false
		}
		c, ok := copyValue(v)
		if !ok {
			return nil, false
		}
		out[k] = c
	}
	return out, true
}

// copyValue deep-copies a value of JSON's types (as encoding/json
// decodes into any); false for anything else.
func copyValue(v any) (any, bool) {
	switch x := v.(type) {
	case nil, bool:
		return x, true
	case string:
		return x, utf8.ValidString(x)
	case float64:
		return x, !math.IsNaN(x) && !math.IsInf(x, 0)
	case map[string]any:
		if x == nil {
			return nil, true
		}
		return copyObject(x, false)
	case []any:
		if x == nil {
			return nil, true
		}
		out := make([]any, len(x))
		for i, e := range x {
			c, ok := copyValue(e)
			if !ok {
				return nil, false
			}
			out[i] = c
		}
		return out, true
	}
	return nil, false
}
