package api

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/bmedge/bmedge/coordinator/engine/readings"
	"github.com/bmedge/bmedge/protocol"
)

// The hardware's health beyond Ironic's health field (1.109): a node's
// sensors and the entries of its BMC's event log, as the site's edge
// agent read them (agent/bmc healthsync.go; kept by coordinator/engine
// health.go). They are this API's own and served at every version.

// maxEventsPage bounds one page of events (and is the default).
const maxEventsPage = readings.MaxEventsKept

func (s *Server) nodeSensors(w http.ResponseWriter, r *http.Request) {
	for k := range r.URL.Query() {
		writeError(w, 400, fmt.Sprintf("Invalid query parameter ?%s=%s received; GET /v1/nodes/{node}/sensors takes none.", k, r.URL.Query().Get(k)))
		return
	}
	sensors, health, id, err := s.e.Sensors(r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	out := map[string]any{"node_uuid": id, "health": nullable(health), "read_at": nil, "sensors": []protocol.Sensor{}, "error": nil}
	if sensors != nil {
		out["read_at"], out["error"] = sensors.ReadAt, nullable(sensors.Error)
		if sensors.Sensors != nil {
			out["sensors"] = sensors.Sensors
		}
	}
	writeJSON(w, 200, out)
}

func (s *Server) nodeEvents(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "since" && k != "limit" {
			writeError(w, 400, fmt.Sprintf("Invalid query parameter ?%s=%s received; GET /v1/nodes/{node}/events takes since (the last seq read) and limit.", k, q.Get(k)))
			return
		}
	}
	var since uint64
	if v := q.Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			writeError(w, 400, fmt.Sprintf("since=%s is not a seq: give the last_seq of the previous answer (a number), or leave it out for every entry kept", shortQuote(v)))
			return
		}
		since = n
	}
	limit := maxEventsPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxEventsPage {
			writeError(w, 400, fmt.Sprintf("limit=%s: want a number from 1 to %d", shortQuote(v), maxEventsPage))
			return
		}
		limit = n
	}
	ev, id, err := s.e.Events(r.PathValue("id"), since, limit)
	if err != nil {
		writeErr(w, err)
		return
	}
	events := ev.Events
	if events == nil {
		events = []readings.Event{}
	}
	next := since
	if len(events) > 0 {
		next = events[len(events)-1].Seq
	}
	writeJSON(w, 200, map[string]any{"node_uuid": id, "events": events, "last_seq": next, "newest_seq": ev.LastSeq, "dropped": ev.Dropped})
}
