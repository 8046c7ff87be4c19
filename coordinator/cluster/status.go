package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// MemberStatus is one member as it reports itself.
type MemberStatus struct {
	Name    string `json:"name"`
	Address string `json:"address"`
	// Role is leader, follower or candidate as the member says, or
	// unreachable when it did not answer.
	Role string `json:"role"`
	// Voter: the member votes (every member added by add-member does).
	Voter bool `json:"voter"`
	// LastContact is when the member last heard from the leader (the
	// leader: now), AppliedIndex the last entry of the log applied to
	// its store, Term its current term.
	LastContact  *time.Time `json:"last_contact,omitempty"`
	AppliedIndex uint64     `json:"applied_index"`
	CommitIndex  uint64     `json:"commit_index"`
	Term         uint64     `json:"term"`
	// Fingerprint names the member's db.key and secret without showing
	// them: every member's must be the same.
	Fingerprint string `json:"keys_fingerprint"`
	// BrokerURL is the member's MQTT broker as sites reach it (the
	// Server Reference of its followers' brokers while it leads).
	BrokerURL string `json:"broker_url,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Status is the cluster as one member sees it.
type Status struct {
	// Member is the member that answered, Leader the leader's name (""
	// when there is none).
	Member  string         `json:"member"`
	Leader  string         `json:"leader"`
	Members []MemberStatus `json:"members"`
}

// self is this member's own report.
func (m *Member) self() MemberStatus {
	st := m.raft.Stats()
	s := MemberStatus{Name: m.cfg.Name, Address: string(m.trans.LocalAddr()), Role: strings.ToLower(m.raft.State().String()), Voter: true, Fingerprint: m.fingerprint, BrokerURL: m.cfg.BrokerURL}
	s.AppliedIndex = m.raft.AppliedIndex()
	s.CommitIndex = m.raft.CommitIndex()
	s.Term, _ = strconv.ParseUint(st["term"], 10, 64)
	if m.raft.State() == raft.Leader {
		now := time.Now().UTC()
		s.LastContact = &now
	} else if lc := m.raft.LastContact(); !lc.IsZero() {
		lc = lc.UTC()
		s.LastContact = &lc
	}
	return s
}

// Configuration is the cluster's members as this member's log has them.
func (m *Member) Configuration() ([]Peer, error) {
	f := m.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	var out []Peer
	for _, s := range f.Configuration().Servers {
		out = append(out, Peer{Name: string(s.ID), Addr: string(s.Address)})
	}
	return out, nil
}

// Status asks every member of the configuration for its own report
// (over the link, each within 2 s); one that does not answer is listed
// as unreachable.
func (m *Member) Status() (Status, error) {
	f := m.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return Status{}, err
	}
	out := Status{Member: m.cfg.Name, Leader: m.Leader().Name}
	servers := f.Configuration().Servers
	out.Members = make([]MemberStatus, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		if string(s.ID) == m.cfg.Name {
			out.Members[i] = m.self()
			out.Members[i].Voter = s.Suffrage == raft.Voter
			continue
		}
		wg.Add(1)
		go func(i int, s raft.Server) {
			defer wg.Done()
			ms := MemberStatus{Name: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter}
			var got MemberStatus
			switch {
			case m.client == nil:
				ms.Role, ms.Error = "unreachable", "no link (in-memory transport)"
			default:
				if err := m.ask(string(s.Address), "/cluster/self", &got); err != nil {
					ms.Role, ms.Error = "unreachable", err.Error()
				} else {
					got.Address, got.Voter = ms.Address, ms.Voter
					ms = got
					if ms.Fingerprint != m.fingerprint {
						ms.Error = "holds another db.key or secret than " + m.cfg.Name + ": copy both from a member of the cluster"
					}
				}
			}
			out.Members[i] = ms
		}(i, s)
	}
	wg.Wait()
	return out, nil
}

// Errors of the membership changes.
var (
	// ErrNotLeader: this member is not the leader (the API forwards the
	// request to the leader before it gets here).
	ErrNotLeader = errors.New("this member is not the cluster's leader")
)

// AddMember adds a member (on the leader), first as a non-voter, made a
// voter once it has caught up (promote). Its data folder must start
// empty but for the cluster's db.key and secret; started with
// --cluster-peers that list it, it then receives a snapshot and the log.
func (m *Member) AddMember(name, addr string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	conf, err := m.Configuration()
	if err != nil {
		return err
	}
	for _, p := range conf {
		if p.Name == name {
			return fmt.Errorf("member %s is already in the cluster (at %s); remove-member it first to change its address", name, p.Addr)
		}
		if p.Addr == addr {
			return fmt.Errorf("member %s already has the address %s", p.Name, addr)
		}
	}
	// A non-voter first: a voter that has not caught up would count in
	// the majority without being able to take part in it (with one
	// member, adding a second would stop the cluster until it runs).
	// promote makes it a voter once it has applied the log.
	return m.raft.AddNonvoter(raft.ServerID(name), raft.ServerAddress(addr), 0, 30*time.Second).Error()
}

// promoteLag is how far behind the leader's commit index a non-voter
// may be when it is made a voter.
const promoteLag = 16

// promote runs on every member; on the leader, every second, it makes
// each non-voter that has applied the log (it answers over the link
// with its applied index) a voter.
func (m *Member) promote() {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-m.stopped:
			return
		case <-tick.C:
		}
		if !m.IsLeader() || m.client == nil {
			continue
		}
		f := m.raft.GetConfiguration()
		if f.Error() != nil {
			continue
		}
		for _, s := range f.Configuration().Servers {
			if s.Suffrage != raft.Nonvoter {
				continue
			}
			var got MemberStatus
			if err := m.ask(string(s.Address), "/cluster/self", &got); err != nil || got.Fingerprint != m.fingerprint {
				continue
			}
			if got.AppliedIndex+promoteLag < m.raft.CommitIndex() {
				continue
			}
			if err := m.raft.AddVoter(s.ID, s.Address, 0, 10*time.Second).Error(); err != nil {
				m.log.Warn("could not make the new member a voter; trying again", "member", s.ID, "err", err)
				continue
			}
			m.log.Info("the new member caught up and votes", "member", s.ID, "applied_index", got.AppliedIndex)
		}
	}
}

// RemoveMember removes a member (on the leader); the leader may remove
// itself, after which another member leads.
func (m *Member) RemoveMember(name string) error {
	conf, err := m.Configuration()
	if err != nil {
		return err
	}
	for _, p := range conf {
		if p.Name == name {
			return m.raft.RemoveServer(raft.ServerID(name), 0, 30*time.Second).Error()
		}
	}
	return fmt.Errorf("member %s is not in the cluster; 'coordinator cluster status' lists the members", name)
}

// TransferLeadership hands the leadership to the member named (any up
// to date one when name is "").
func (m *Member) TransferLeadership(name string) error {
	if name == "" {
		return m.raft.LeadershipTransfer().Error()
	}
	conf, err := m.Configuration()
	if err != nil {
		return err
	}
	for _, p := range conf {
		if p.Name == name {
			if name == m.cfg.Name {
				return fmt.Errorf("member %s already leads", name)
			}
			return m.raft.LeadershipTransferToServer(raft.ServerID(p.Name), raft.ServerAddress(p.Addr)).Error()
		}
	}
	return fmt.Errorf("member %s is not in the cluster; 'coordinator cluster status' lists the members", name)
}

// serveLink answers the link's HTTP requests: a member's questions
// (/cluster/self, /cluster/configuration), and the API requests
// followers forward (given to the handler set by SetHandler).
func (m *Member) serveLink(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/cluster/self":
		writeJSON(w, http.StatusOK, m.self())
		return
	case "/cluster/configuration":
		conf, err := m.Configuration()
		if err != nil {
			conf = nil
		}
		writeJSON(w, http.StatusOK, conf)
		return
	}
	m.handler.Lock()
	h := m.handler.h
	m.handler.Unlock()
	if h == nil || !m.IsLeader() {
		Unavailable(w, "this member is not the cluster's leader (any more); try again")
		return
	}
	// The caller's address, for the API's throttling of failed logins
	// and its log: the link is between members only.
	if src := r.Header.Get(ForwardedFor); src != "" {
		r.RemoteAddr = src
	}
	r.Header.Del(ForwardedFor)
	h.ServeHTTP(w, r)
}

// ForwardedFor is the header in which a follower passes the caller's
// address to the leader, over the link only.
const ForwardedFor = "Bmedge-Forwarded-For"

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// RetryAfter is what a 503 of a cluster without a leader tells clients
// to wait, in seconds: an election takes one to two.
const RetryAfter = 2

// Unavailable answers 503 with Retry-After in Ironic's error shape.
func Unavailable(w http.ResponseWriter, msg string) {
	w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
	Error(w, http.StatusServiceUnavailable, msg)
}

// Error answers code with msg in Ironic's error shape.
func Error(w http.ResponseWriter, code int, msg string) {
	inner, _ := json.Marshal(map[string]any{"faultstring": msg, "faultcode": "Server", "debuginfo": nil})
	if code < 500 {
		inner, _ = json.Marshal(map[string]any{"faultstring": msg, "faultcode": "Client", "debuginfo": nil})
	}
	writeJSON(w, code, map[string]string{"error_message": string(inner)})
}
