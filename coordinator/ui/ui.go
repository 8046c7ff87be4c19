// Package ui serves the coordinator's web view under /ui/ on the API
// listener: the fleet, the node list and a node's page, made on the
// server (html/template) with a little plain JavaScript, and live updates
// by server-sent events (/ui/events). It serves no state-changing
// endpoint: the node page's actions are JSON requests to the /v1 API,
// which keeps its own checks (authentication, Content-Type, CSRF). It
// never shows a secret: driver_info, instance_info and step arguments
// are not shown at all. Authentication is the caller's: server.Start
// wraps the handler in the API's.
package ui

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bmedge/bmedge/coordinator/cluster"
	"github.com/bmedge/bmedge/coordinator/engine"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/lib/ratelog"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Defaults of Options.
const (
	// DefaultMaxEventClients is how many /ui/events streams may be open
	// at once; one more is answered 503 with Retry-After.
	DefaultMaxEventClients = 64
	// DefaultMaxEventClientsPerUser is each user's share of them (with
	// --auth none, each source address's): one user cannot hold all of
	// them.
	DefaultMaxEventClientsPerUser = 16
	// DefaultEventBuffer is how many node changes wait for a slow
	// events client before it is told to read everything again.
	DefaultEventBuffer = 256
	// PageSize is how many nodes one page of the node list shows.
	PageSize = 50
	// keepAlive is how often an idle events stream gets a comment, so
	// that proxies keep it open.
	keepAlive = 25 * time.Second
)

// Options configure the web view; zero values take the defaults.
type Options struct {
	Log             *slog.Logger
	MaxEventClients int
	// MaxEventClientsPerUser is one user's share of MaxEventClients.
	MaxEventClientsPerUser int
	EventBuffer            int
	// Cluster, for a member of a coordinator cluster, reads the
	// cluster's status (cluster.Member.Status), which the cluster page
	// shows; nil for a single coordinator.
	Cluster func() (cluster.Status, error)
}

// Handler serves /ui/.
type Handler struct {
	e       *engine.Engine
	o       Options
	tpl     *template.Template
	mux     *http.ServeMux
	clients atomic.Int64
	// perUser counts the open events streams of each user (user:NAME,
	// or addr:IP without authentication).
	perMu   sync.Mutex
	perUser map[string]int
	done    chan struct{}
	once    sync.Once
	limited *ratelog.Limiter
}

// New returns the web view of e.
func New(e *engine.Engine, o Options) *Handler {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.MaxEventClients <= 0 {
		o.MaxEventClients = DefaultMaxEventClients
	}
	if o.MaxEventClientsPerUser <= 0 {
		o.MaxEventClientsPerUser = min(DefaultMaxEventClientsPerUser, o.MaxEventClients)
	}
	if o.EventBuffer <= 0 {
		o.EventBuffer = DefaultEventBuffer
	}
	h := &Handler{e: e, o: o, mux: http.NewServeMux(), done: make(chan struct{}), limited: ratelog.New(o.Log, ratelog.DefaultInterval),
		perUser: map[string]int{}}
	h.tpl = template.Must(template.New("").Funcs(template.FuncMap{
		"ago":      ago,
		"when":     when,
		"pct":      func(f float64) string { return strconv.Itoa(int(f*100+0.5)) + "%" },
		"failed":   failedState,
		"qs":       func(v url.Values) template.URL { return template.URL(v.Encode()) },
		"pagelink": pageLink,
		"add1":     func(i int) int { return i + 1 },
		"sub1":     func(i int) int { return i - 1 },
		"since":    since,
		"bytes":    byteSize,
		"table":    func(n []Summary, sel bool) nodeTable { return nodeTable{Nodes: n, Select: sel} },
		"cluster":  func() bool { return o.Cluster != nil },
	}).ParseFS(templateFS, "templates/*.html"))
	static, _ := fs.Sub(staticFS, "static")
	h.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET /ui/{$}", h.fleet)
	h.mux.HandleFunc("GET /ui/nodes", h.nodes)
	h.mux.HandleFunc("GET /ui/nodes/{id}", h.node)
	h.mux.HandleFunc("GET /ui/sites/{name}", h.site)
	h.mux.HandleFunc("GET /ui/cluster", h.clusterView)
	h.mux.HandleFunc("GET /ui/api/nodes/{id}", h.nodeJSON)
	h.mux.HandleFunc("GET /ui/events", h.events)
	h.mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusMovedPermanently) })
	h.mux.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "The web view only reads: its actions are requests to the /v1 API", http.StatusMethodNotAllowed)
			return
		}
		http.Error(w, "No such page of the web view: start at /ui/", http.StatusNotFound)
	})
	return h
}

// Close ends the open events streams (server shutdown).
func (h *Handler) Close() { h.once.Do(func() { close(h.done) }) }

// ServeHTTP serves a page of the web view.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// Scripts and styles only from here; no framing (the action buttons
	// must not be clicked through someone else's page).
	// The node console's WebSocket goes to this host only; its terminal
	// (xterm.js) sets its own styles.
	host := strings.Map(func(c rune) rune {
		if c == ';' || c == ' ' || c == ',' || c == '\'' {
			return -1
		}
		return c
	}, r.Host)
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self' ws://"+host+" wss://"+host+"; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	h.mux.ServeHTTP(w, r)
}

// Summary is what the view shows of a node in lists and what an events
// stream sends when it changes. It holds no secret.
type Summary struct {
	UUID              string    `json:"uuid"`
	Name              string    `json:"name"`
	Site              string    `json:"site"`
	SiteOnline        bool      `json:"site_online"`
	Driver            string    `json:"driver"`
	State             string    `json:"provision_state"`
	Target            string    `json:"target_provision_state"`
	Power             string    `json:"power_state"`
	TargetPower       string    `json:"target_power_state"`
	LastError         string    `json:"last_error"`
	Maintenance       bool      `json:"maintenance"`
	MaintenanceReason string    `json:"maintenance_reason"`
	Fault             string    `json:"fault"`
	Retired           bool      `json:"retired"`
	RetiredReason     string    `json:"retired_reason"`
	Step              string    `json:"step"`
	StepProgress      float64   `json:"step_progress"`
	StepDetail        string    `json:"step_detail"`
	Locked            bool      `json:"locked"`
	Updated           time.Time `json:"updated_at"`
	Gone              bool      `json:"gone,omitempty"`
}

func summarize(n *fsm.Node, online bool) Summary {
	s := Summary{UUID: n.UUID, Name: n.Name, Site: n.Site, SiteOnline: online, Driver: n.Driver, State: string(n.ProvisionState),
		Target: string(n.TargetProvisionState), Power: n.PowerState, TargetPower: n.TargetPowerState, LastError: n.LastError,
		Maintenance: n.Maintenance, MaintenanceReason: n.MaintenanceReason, Fault: n.Fault, Retired: n.Retired, RetiredReason: n.RetiredReason,
		Locked: n.Reservation != "", Updated: n.UpdatedAt}
	step := n.CleanStep
	if step == nil {
		step = n.DeployStep
	}
	if step != nil {
		s.Step, s.StepProgress, s.StepDetail = step.Name(), step.Progress, step.Detail
	}
	return s
}

func failedState(state string) bool {
	return strings.HasSuffix(state, " failed") || state == string(fsm.Error)
}

// summary reads one node; ok is false when it does not exist.
func (h *Handler) summary(id string) (s Summary, ok bool) {
	err := h.e.View(id, func(n *fsm.Node, online bool) error {
		s = summarize(n, online)
		return nil
	})
	return s, err == nil
}

type siteRow struct {
	engine.SiteInfo
	States      []stateCount
	Failed      int
	Maintenance int
}

type stateCount struct {
	State string
	Count int
}

type fleetPage struct {
	Title       string
	Page        string
	Nodes       int
	Failed      int
	Maintenance int
	Offline     int
	States      []stateCount
	Sites       []siteRow
	Now         time.Time
}

func (h *Handler) fleet(w http.ResponseWriter, r *http.Request) {
	p := fleetPage{Title: "Fleet", Page: "fleet", Now: time.Now()}
	perSite := map[string]map[string]int{}
	failed, maint := map[string]int{}, map[string]int{}
	all := map[string]int{}
	h.e.Each(func(n *fsm.Node) bool {
		st := string(n.ProvisionState)
		if perSite[n.Site] == nil {
			perSite[n.Site] = map[string]int{}
		}
		perSite[n.Site][st]++
		all[st]++
		p.Nodes++
		if failedState(st) {
			failed[n.Site]++
			p.Failed++
		}
		if n.Maintenance {
			maint[n.Site]++
			p.Maintenance++
		}
		return true
	})
	p.States = counts(all)
	for _, s := range h.e.Sites() {
		if !s.Online {
			p.Offline++
		}
		p.Sites = append(p.Sites, siteRow{SiteInfo: s, States: counts(perSite[s.Name]), Failed: failed[s.Name], Maintenance: maint[s.Name]})
	}
	h.render(w, r, "fleet", p)
}

func counts(m map[string]int) []stateCount {
	out := make([]stateCount, 0, len(m))
	for st, c := range m {
		out = append(out, stateCount{st, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].State < out[j].State })
	return out
}

type listPage struct {
	Title       string
	Page        string
	Nodes       []Summary
	Total       int
	First, Last int
	PageNo      int
	Pages       int
	Query       url.Values
	State       string
	Site        string
	Maintenance string
	Retired     string
	Search      string
	States      []string
	Sites       []string
	Now         time.Time
}

func (h *Handler) nodes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := listPage{Title: "Nodes", Page: "nodes", State: q.Get("state"), Site: q.Get("site"), Maintenance: q.Get("maintenance"),
		Retired: q.Get("retired"), Search: strings.TrimSpace(q.Get("q")), Now: time.Now()}
	p.PageNo, _ = strconv.Atoi(q.Get("page"))
	p.PageNo = max(1, p.PageNo)
	for _, st := range fsm.AllStates() {
		p.States = append(p.States, string(st))
	}
	// Reachability is read before Each: an engine call inside Each
	// would take the engine's read lock a second time, which waits
	// behind a waiting writer (the loop) that waits for Each.
	online := map[string]bool{}
	for _, s := range h.e.Sites() {
		p.Sites = append(p.Sites, s.Name)
		online[s.Name] = s.Online
	}
	search := strings.ToLower(p.Search)
	skip := (p.PageNo - 1) * PageSize
	h.e.Each(func(n *fsm.Node) bool {
		if p.State == "failed" && !failedState(string(n.ProvisionState)) ||
			p.State != "" && p.State != "failed" && string(n.ProvisionState) != p.State || p.Site != "" && n.Site != p.Site ||
			p.Maintenance == "true" && !n.Maintenance || p.Maintenance == "false" && n.Maintenance ||
			p.Retired == "true" && !n.Retired || p.Retired == "false" && n.Retired ||
			search != "" && !strings.Contains(strings.ToLower(n.Name), search) && !strings.HasPrefix(n.UUID, search) {
			return true
		}
		p.Total++
		if p.Total > skip && len(p.Nodes) < PageSize {
			p.Nodes = append(p.Nodes, summarize(n, online[n.Site]))
		}
		return true
	})
	p.Pages = max(1, (p.Total+PageSize-1)/PageSize)
	if len(p.Nodes) > 0 {
		p.First, p.Last = skip+1, skip+len(p.Nodes)
	}
	p.Query = url.Values{}
	for k, v := range map[string]string{"state": p.State, "site": p.Site, "maintenance": p.Maintenance, "retired": p.Retired, "q": p.Search} {
		if v != "" {
			p.Query.Set(k, v)
		}
	}
	h.render(w, r, "nodes", p)
}

func pageLink(q url.Values, page int) template.URL {
	c := url.Values{}
	for k, v := range q {
		c[k] = v
	}
	c.Set("page", strconv.Itoa(page))
	return template.URL("/ui/nodes?" + c.Encode())
}

type nodePage struct {
	Title   string
	Page    string
	Node    Summary
	History []fsm.HistoryEntry
	Ports   []engine.Port
	// Inventory is nil until the node was inspected.
	Inventory *inventoryView
	Steps     stepsView
	Now       time.Time
	// Allowed are the actions the node's state allows (fsm.Allowed,
	// maintenance and retirement), the only ones the page offers.
	Allowed map[string]bool
	// ConsoleInterface and ConsoleEnabled: the node's serial console
	// (docs/console.md).
	ConsoleInterface string
	ConsoleEnabled   bool
}

func (h *Handler) node(w http.ResponseWriter, r *http.Request) {
	s, ok := h.summary(r.PathValue("id"))
	if !ok {
		http.Error(w, fmt.Sprintf("Node %s could not be found: see the node list at /ui/nodes", r.PathValue("id")), http.StatusNotFound)
		return
	}
	p := nodePage{Title: "Node " + s.Name, Page: "node", Node: s, Now: time.Now()}
	if s.Name == "" {
		p.Title = "Node " + s.UUID
	}
	hist, _ := h.e.History(s.UUID)
	// Newest first, at most 100 entries.
	for i := len(hist) - 1; i >= 0 && len(p.History) < 100; i-- {
		p.History = append(p.History, hist[i])
	}
	p.Ports, _ = h.e.Ports(s.UUID)
	if inv, err := h.e.Inventory(s.UUID); err == nil {
		p.Inventory = viewInventory(inv)
	}
	p.Steps.Steps, p.Steps.Known, _ = h.e.CleanSteps(s.UUID, 0)
	p.Allowed = map[string]bool{}
	for _, v := range fsm.Allowed(fsm.State(s.State)) {
		p.Allowed[string(v)] = true
	}
	p.Allowed["maintenance-on"], p.Allowed["maintenance-off"] = !s.Maintenance, s.Maintenance
	p.Allowed["retire"], p.Allowed["unretire"] = !s.Retired, s.Retired
	_ = h.e.View(s.UUID, func(n *fsm.Node, _ bool) error {
		p.ConsoleInterface, p.ConsoleEnabled = engine.ConsoleInterfaceOf(n), n.ConsoleEnabled
		return nil
	})
	h.render(w, r, "node", p)
}

func (h *Handler) nodeJSON(w http.ResponseWriter, r *http.Request) {
	s, ok := h.summary(r.PathValue("id"))
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "node " + r.PathValue("id") + " could not be found"})
		return
	}
	writeJSON(w, http.StatusOK, s)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// render writes a page, or only its live part when the page's script
// asks for it (X-UI-Fragment: 1) to refresh it in place.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string, data any) {
	tpl := name
	if r.Header.Get("X-UI-Fragment") == "1" {
		tpl = name + "-live"
	} else {
		tpl = name + "-page"
	}
	var b bytes.Buffer
	if err := h.tpl.ExecuteTemplate(&b, tpl, data); err != nil {
		h.o.Log.Error("web view page failed", "page", name, "err", err)
		http.Error(w, "The page could not be made; the coordinator's log says why", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// events streams node changes as server-sent events: "node" with the
// node's Summary (gone: true when it was deleted), and "resync" when
// changes were dropped because the client read too slowly (it must read
// what it shows again). ?node=UUID limits the stream to one node.
func (h *Handler) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported on this connection", http.StatusInternalServerError)
		return
	}
	if h.clients.Add(1) > int64(h.o.MaxEventClients) {
		h.clients.Add(-1)
		h.limited.Warn("ui-events-full", "web view events stream refused: too many open", "max", h.o.MaxEventClients)
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("Too many live views are open (at most %d): close some, or retry in 10 seconds", h.o.MaxEventClients), http.StatusServiceUnavailable)
		return
	}
	defer h.clients.Add(-1)
	who := streamOwner(r)
	if !h.takeShare(who) {
		h.limited.Warn("ui-events-user-full", "web view events stream refused: this user holds their share", "max_per_user", h.o.MaxEventClientsPerUser)
		w.Header().Set("Retry-After", "10")
		http.Error(w, fmt.Sprintf("You have %d live views open, the most one user may (of %d in all): close some, or retry in 10 seconds", h.o.MaxEventClientsPerUser, h.o.MaxEventClients), http.StatusServiceUnavailable)
		return
	}
	defer h.dropShare(who)
	only := r.URL.Query().Get("node")
	if only != "" {
		if s, ok := h.summary(only); ok {
			only = s.UUID
		}
	}
	sub, cancel := h.e.SubscribeViews(h.o.EventBuffer)
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n: live\n\n")
	fl.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	pending := map[string]bool{}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-h.done:
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
			continue
		case id := <-sub.C:
			pending[id] = true
		}
		// Take what else is waiting, so that a burst of changes to one
		// node is sent once.
	drain:
		for {
			select {
			case id := <-sub.C:
				pending[id] = true
			default:
				break drain
			}
		}
		if sub.Lost() {
			clear(pending)
			if _, err := fmt.Fprint(w, "event: resync\ndata: {}\n\n"); err != nil {
				return
			}
			fl.Flush()
			continue
		}
		ids := make([]string, 0, len(pending))
		for id := range pending {
			delete(pending, id)
			if only == "" || id == only {
				ids = append(ids, id)
			}
		}
		// One read of the engine for a burst (a few nodes per hold of its
		// read lock), not one per node: under thousands of changes a
		// second, a stream that waited for the lock per node fell behind.
		views := h.e.Views(ids, "", false, func(n *fsm.Node, online bool) any { return summarize(n, online) }, nil)
		for i, id := range ids {
			s, ok := views[i].(Summary)
			if !ok {
				s = Summary{UUID: id, Gone: true}
			}
			b, _ := json.Marshal(s)
			if _, err := fmt.Fprintf(w, "event: node\ndata: %s\n\n", b); err != nil {
				return
			}
		}
		fl.Flush()
	}
}

func ago(now time.Time, t any) string {
	var tt time.Time
	switch v := t.(type) {
	case time.Time:
		tt = v
	case *time.Time:
		if v == nil {
			return "never"
		}
		tt = *v
	}
	if tt.IsZero() {
		return "never"
	}
	d := max(0, now.Sub(tt).Round(time.Second))
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm ago", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

// since is how long ago t was, without "ago" ("3h 5m").
func since(now time.Time, t any) string { return strings.TrimSuffix(ago(now, t), " ago") }

// byteSize is a size for people: 1.5 GiB.
func byteSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// nodeTable is what the node-table template shows: nodes, with a
// selection box each when Select.
type nodeTable struct {
	Nodes  []Summary
	Select bool
}

func when(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return ""
		}
		return v.UTC().Format(time.RFC3339)
	case *time.Time:
		if v == nil {
			return ""
		}
		return v.UTC().Format(time.RFC3339)
	}
	return ""
}

// streamOwner is whose share an events stream counts against: the
// authenticated user (the server checked the credentials before the web
// view sees the request), or the source address without authentication.
func streamOwner(r *http.Request) string {
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		return "user:" + u
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "addr:" + host
}

// takeShare counts a stream of who, unless who holds their share.
func (h *Handler) takeShare(who string) bool {
	h.perMu.Lock()
	defer h.perMu.Unlock()
	if h.perUser[who] >= h.o.MaxEventClientsPerUser {
		return false
	}
	h.perUser[who]++
	return true
}

func (h *Handler) dropShare(who string) {
	h.perMu.Lock()
	defer h.perMu.Unlock()
	if h.perUser[who]--; h.perUser[who] <= 0 {
		delete(h.perUser, who)
	}
}
