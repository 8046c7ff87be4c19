package api

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// This file serves Ironic's conductors (API 1.49): the hosts that drive
// nodes. Here they are the coordinator itself, which runs every node's
// state machine and holds its lock (a node's conductor and reservation
// say "coordinator", conductor group ""), and each site's edge agent,
// which drives the BMCs and ramdisks of the nodes of its conductor group
// (the site's name). A site's conductor is alive while its edge agent is
// connected.

// coordinatorHost is the coordinator's hostname as a conductor: the name
// nodes show as their conductor and reservation.
const coordinatorHost = "coordinator"

// apiStarted is when this API started: the coordinator conductor's
// created_at.
var apiStarted = time.Now().UTC()

// conductorFields are a conductor's fields (Ironic's), the ones ?fields=
// may name; a list without detail has defaultConductorFields.
var (
	conductorFields        = []string{"hostname", "conductor_group", "alive", "drivers", "created_at", "updated_at", "links"}
	defaultConductorFields = []string{"hostname", "conductor_group", "alive"}
)

type conductor struct {
	hostname, group string
	alive           bool
	created         time.Time
	updated         *time.Time
}

// conductors are the coordinator, then the sites by name.
func (s *Server) conductors() []conductor {
	now := time.Now().UTC()
	out := []conductor{{hostname: coordinatorHost, alive: true, created: apiStarted, updated: &now}}
	for _, si := range s.e.Sites() {
		c := conductor{hostname: si.Name, group: si.Name, alive: si.Online, created: si.CreatedAt.UTC(), updated: si.LastSeen}
		out = append(out, c)
	}
	return out
}

func (s *Server) conductorView(r *http.Request, c conductor) map[string]any {
	var updated any
	if c.updated != nil {
		updated = c.updated.UTC()
	}
	return map[string]any{"hostname": c.hostname, "conductor_group": c.group, "alive": c.alive,
		"drivers": s.e.Machine().Config().Drivers.Names(), "created_at": c.created, "updated_at": updated,
		"links": link(r, "/v1/conductors/"+c.hostname)}
}

// conductorFieldsParam reads ?fields= of a conductor request: Ironic's
// check_allowed_fields (400 for a field a conductor does not have).
func conductorFieldsParam(f string) ([]string, error) {
	if f == "" {
		return nil, nil
	}
	fields := strings.Split(f, ",")
	for _, x := range fields {
		if !slices.Contains(conductorFields, x) {
			return nil, fmt.Errorf("Field %s is not a valid field; a conductor has %s.", x, strings.Join(conductorFields, ", "))
		}
	}
	return fields, nil
}

// listConductors is GET /v1/conductors: Ironic's query parameters
// (detail, fields, limit, marker, sort_key, sort_dir).
func (s *Server) listConductors(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains([]string{"detail", "fields", "limit", "marker", "sort_key", "sort_dir"}, k) {
			writeError(w, 400, fmt.Sprintf("Unknown query parameter %q; a conductor list takes detail, fields, limit, marker, sort_key and sort_dir", k))
			return
		}
	}
	detail, err := boolParam(q, "detail")
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	fields, err := conductorFieldsParam(q.Get("fields"))
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	if fields != nil && detail != nil && *detail {
		writeError(w, 400, "Can not specify ?detail=True and fields in the same request.")
		return
	}
	if fields == nil {
		fields = defaultConductorFields
		if detail != nil && *detail {
			fields = conductorFields
		}
	}
	limit := maxLimit
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			writeError(w, 400, fmt.Sprintf("Invalid limit %q: use a positive integer", l))
			return
		}
		if n > 0 {
			limit = min(n, maxLimit)
		}
	}
	sortKey, sortDir := q.Get("sort_key"), q.Get("sort_dir")
	if sortDir == "" {
		sortDir = "asc"
	}
	if sortDir != "asc" && sortDir != "desc" {
		writeError(w, 400, fmt.Sprintf("Invalid sort direction: %s. Acceptable values are 'asc' or 'desc'", sortDir))
		return
	}
	all := s.conductors()
	var key func(c conductor) string
	switch sortKey {
	case "", "id", "created_at":
		// Registration order: the coordinator, then the sites.
	case "hostname":
		key = func(c conductor) string { return c.hostname }
	case "conductor_group":
		key = func(c conductor) string { return c.group }
	case "updated_at":
		key = func(c conductor) string {
			if c.updated == nil {
				return ""
			}
			return c.updated.Format(time.RFC3339Nano)
		}
	default:
		// Ironic refuses alive and drivers (not columns) as any unknown key.
		writeError(w, 400, fmt.Sprintf("The sort_key value %s is an invalid field for sorting; use hostname, conductor_group, created_at or updated_at", sortKey))
		return
	}
	if key != nil {
		sort.SliceStable(all, func(i, j int) bool { return key(all[i]) < key(all[j]) })
	}
	if sortDir == "desc" {
		slices.Reverse(all)
	}
	if m := q.Get("marker"); m != "" {
		i := slices.IndexFunc(all, func(c conductor) bool { return c.hostname == m })
		if i < 0 {
			writeError(w, 404, fmt.Sprintf("Conductor %s could not be found.", m))
			return
		}
		all = all[i+1:]
	}
	out := []map[string]any{}
	for _, c := range all {
		if len(out) == limit {
			break
		}
		out = append(out, pickConductor(s.conductorView(r, c), fields))
	}
	resp := map[string]any{"conductors": out}
	if len(out) == limit && len(all) > limit {
		v := q
		v.Set("marker", all[limit-1].hostname)
		v.Set("limit", strconv.Itoa(limit))
		resp["next"] = baseURL(r) + "/v1/conductors?" + v.Encode()
	}
	writeJSON(w, 200, resp)
}

// pickConductor keeps fields of v, and links, which Ironic always keeps.
func pickConductor(v map[string]any, fields []string) map[string]any {
	out := map[string]any{"links": v["links"]}
	for _, f := range fields {
		out[f] = v[f]
	}
	return out
}

// getConductor is GET /v1/conductors/{hostname}.
func (s *Server) getConductor(w http.ResponseWriter, r *http.Request) {
	fields, err := conductorFieldsParam(r.URL.Query().Get("fields"))
	if err != nil {
		writeError(w, 400, err.Error())
		return
	}
	host := r.PathValue("hostname")
	for _, c := range s.conductors() {
		if c.hostname == host {
			v := s.conductorView(r, c)
			if fields != nil {
				v = pickConductor(v, fields)
			}
			writeJSON(w, 200, v)
			return
		}
	}
	writeError(w, 404, fmt.Sprintf("Conductor %s could not be found.", host))
}
