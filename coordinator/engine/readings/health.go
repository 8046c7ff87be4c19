package readings

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/protocol"
)

// MaxEventsKept bounds the event-log entries kept per node: the newest
// are kept, older ones dropped as new ones come.
const MaxEventsKept = 500

// Sensors are a node's latest sensor readings.
type Sensors struct {
	// ReadAt is when the edge agent read them at the site.
	ReadAt  time.Time         `json:"read_at"`
	Sensors []protocol.Sensor `json:"sensors"`
	// Error is what the site could not read of the BMC then (the rest
	// holds), "" when it read everything.
	Error string `json:"error,omitempty"`
}

// Event is one entry of a node's BMC event log as kept: Seq numbers the
// node's entries in the order they were received (an API reader asks for
// those after the last Seq it saw).
type Event struct {
	Seq        uint64    `json:"seq"`
	ID         string    `json:"id"`
	Time       *string   `json:"time"`
	Severity   *string   `json:"severity"`
	Message    string    `json:"message"`
	Log        string    `json:"log,omitempty"`
	ReceivedAt time.Time `json:"received_at"`
}

// Events are the entries kept of a node's event log, oldest first.
type Events struct {
	LastSeq uint64  `json:"last_seq"`
	Events  []Event `json:"events"`
	// Dropped counts the entries dropped to keep MaxEventsKept.
	Dropped uint64 `json:"dropped,omitempty"`
}

// MergeEvents adds a report's entries to the kept ones: an entry already
// kept (same id: a report sent again, or one the agent took back into a
// newer report) is not added twice; the oldest are dropped past
// MaxEventsKept.
func MergeEvents(old Events, in []protocol.Event, now time.Time) (Events, int) {
	have := make(map[string]bool, len(old.Events))
	for _, e := range old.Events {
		have[e.ID] = true
	}
	added := 0
	for _, e := range in {
		if e.ID == "" || have[e.ID] {
			continue
		}
		have[e.ID] = true
		old.LastSeq++
		ev := Event{Seq: old.LastSeq, ID: e.ID, Message: e.Message, Log: e.Log, ReceivedAt: now}
		if !e.Time.IsZero() {
			t := e.Time.UTC().Format(time.RFC3339)
			ev.Time = &t
		}
		if e.Severity != "" {
			s := e.Severity
			ev.Severity = &s
		}
		old.Events = append(old.Events, ev)
		added++
	}
	if n := len(old.Events) - MaxEventsKept; n > 0 {
		old.Events = append([]Event(nil), old.Events[n:]...)
		old.Dropped += uint64(n)
	}
	return old, added
}

// SortSensors orders sensors by kind, then name, as the API lists them.
func SortSensors(s []protocol.Sensor) {
	sort.SliceStable(s, func(i, j int) bool {
		if s[i].Kind != s[j].Kind {
			return s[i].Kind < s[j].Kind
		}
		return s[i].Name < s[j].Name
	})
}

// LoadSensors reads a node's sensors record (nil when none).
func LoadSensors(rd store.Reader, id string) (*Sensors, error) {
	b, found, err := rd.Get(store.SensorsPrefix + id)
	if err != nil || !found {
		return nil, err
	}
	var out Sensors
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("corrupt sensors record of node %s: %w", id, err)
	}
	return &out, nil
}

// LoadEvents reads a node's events record (empty when none).
func LoadEvents(rd store.Reader, id string) (Events, error) {
	var out Events
	b, found, err := rd.Get(store.EventsPrefix + id)
	if err != nil || !found {
		return out, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return Events{}, fmt.Errorf("corrupt events record of node %s: %w", id, err)
	}
	return out, nil
}
