package systest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// The linearizability tests record what concurrent clients of the API
// did to nodes and check the history with porcupine against one model,
// nodeModel: each node is an object of its own (porcupine checks each
// apart) holding two registers, its description and its provision state.
//
//   - describe(v): PATCH /description. 200: it took effect. 4xx: it did
//     not (the node was busy). No answer, or 5xx (503 included): it may
//     have taken effect at any time after its call, or never: porcupine
//     gets it with an open end (math.MaxInt64), and it may sit anywhere
//     after its call, the end of the history included (where it changes
//     nothing any operation sees).
//   - verb(manage|provide): PUT /states/provision. A verb is
//     asynchronous in general; on a node without automated cleaning
//     (automated_clean false) and the fake deploy, provide
//     (manageable → available) and manage (available → manageable) end
//     in the same commit that accepts them: the 202 is a committed
//     compare-and-set of the provision state, linearizable like a write.
//     202: the state was the verb's from-state and is now its to-state.
//     400 "can not be performed ... while it is in state S": a read of
//     the state (S, not the from-state). Another 4xx: no effect. No
//     answer or 5xx: open, as describe (wherever it lands it moves the
//     state only if it was the from-state then).
//   - read: GET /v1/nodes/ID, 200: the node's description, provision
//     state and target (none: no verb of the history leaves a target)
//     are those of one point between the call and the answer. A read
//     that failed changes nothing and is left out.

type nodeInput struct {
	Node string
	// Kind is "read", "describe" or "verb".
	Kind string
	// Value is what describe writes, Verb the verb's name.
	Value, Verb string
}

type nodeOutput struct {
	// Unknown: no answer, or 5xx.
	Unknown bool
	// Refused: a verb refused (400) by the node's State.
	Refused bool
	// Description, State and Target are what a read saw.
	Description, State, Target string
}

type nodeState struct{ Description, State string }

// verbMoves are the synchronous moves of the verbs the clients use:
// from, to.
var verbMoves = map[string][2]string{
	"provide": {"manageable", "available"},
	"manage":  {"available", "manageable"},
}

// nodeModel checks histories of nodeInput/nodeOutput operations, each
// node starting as start says (a node not in it starts empty).
func nodeModel(start map[string]nodeState) porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var names []string
			for _, op := range h {
				n := op.Input.(nodeInput).Node
				if by[n] == nil {
					names = append(names, n)
				}
				by[n] = append(by[n], op)
			}
			sort.Strings(names)
			var out [][]porcupine.Operation
			for _, n := range names {
				out = append(out, by[n])
			}
			return out
		},
		// nil: the node's first operation has not been placed yet.
		Init: func() any { return nil },
		Step: func(state, input, output any) (bool, any) {
			in, out := input.(nodeInput), output.(nodeOutput)
			s, ok := state.(nodeState)
			if !ok {
				s = start[in.Node]
			}
			switch in.Kind {
			case "read":
				return out.Description == s.Description && out.State == s.State && out.Target == "", s
			case "describe":
				s.Description = in.Value
				return true, s
			case "verb":
				mv, known := verbMoves[in.Verb]
				switch {
				case !known:
					return false, s
				case out.Unknown:
					if s.State == mv[0] {
						s.State = mv[1]
					}
					return true, s
				case out.Refused:
					return out.State == s.State && s.State != mv[0], s
				case s.State != mv[0]:
					return false, s
				}
				s.State = mv[1]
				return true, s
			}
			return false, s
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(nodeInput), output.(nodeOutput)
			res := ""
			switch {
			case out.Unknown:
				res = " -> ?"
			case out.Refused:
				res = fmt.Sprintf(" -> refused in %q", out.State)
			case in.Kind == "read":
				res = fmt.Sprintf(" -> %q %q %q", out.Description, out.State, out.Target)
			}
			switch in.Kind {
			case "describe":
				return fmt.Sprintf("%s describe(%q)%s", in.Node, in.Value, res)
			case "verb":
				return fmt.Sprintf("%s %s%s", in.Node, in.Verb, res)
			}
			return fmt.Sprintf("%s read()%s", in.Node, res)
		},
	}
}

// opMeta is what a recorded operation went through: the member, its
// answer (0: none) and the test's phase at its call.
type opMeta struct {
	Member       string
	Code, Phase  int
	Since, Taken time.Duration
	// Msg is the refusal's text, or why there was no answer.
	Msg string
}

// nodeHistory records the operations of the clients of a test.
type nodeHistory struct {
	hc    *http.Client
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
	// all is every operation tried, those left out too.
	all []porcupine.Operation
	// dropped counts the operations left out: reads that failed and
	// writes refused (4xx, no effect).
	dropped int
	// phase is the test's phase (what it set last), recorded with each
	// operation.
	phase atomic.Int32
}

func newNodeHistory(timeout time.Duration) *nodeHistory {
	return &nodeHistory{hc: &http.Client{Timeout: timeout}, start: time.Now()}
}

func (h *nodeHistory) now() int64 { return time.Since(h.start).Nanoseconds() }

// stateRefusal is the state a verb's refusal names.
var stateRefusal = regexp.MustCompile(`can not be performed on node "[^"]*" while it is in state "([^"]+)"`)

// do runs in through member m for client cl and records it; it returns
// the HTTP status (0: no answer), the output and, for a 503, the
// Retry-After it asked for.
func (h *nodeHistory) do(cl int, m *testrig.Member, in nodeInput) (int, nodeOutput, time.Duration) {
	method, path := "GET", "/v1/nodes/"+in.Node
	var body any
	switch in.Kind {
	case "describe":
		method, body = "PATCH", []map[string]any{{"op": "add", "path": "/description", "value": in.Value}}
	case "verb":
		method, path, body = "PUT", path+"/states/provision", map[string]string{"target": in.Verb}
	}
	b, _ := json.Marshal(body)
	if body == nil {
		b = nil
	}
	req, _ := http.NewRequest(method, "http://"+m.API+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	req.SetBasicAuth(testrig.ClusterUser, testrig.ClusterPassword)
	op := porcupine.Operation{ClientId: cl, Input: in, Call: h.now()}
	ph := int(h.phase.Load())
	code, retry := 0, time.Duration(0)
	var raw []byte
	var failed error
	if resp, err := h.hc.Do(req); err != nil {
		failed = err
	} else {
		code = resp.StatusCode
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		raw = buf.Bytes()
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
			retry = time.Duration(s) * time.Second
		}
	}
	op.Return = h.now()
	meta := opMeta{Member: m.Name, Code: code, Phase: ph, Since: time.Duration(op.Call), Taken: time.Duration(op.Return - op.Call)}
	if failed != nil {
		meta.Msg = failed.Error()
	} else if code >= 300 {
		meta.Msg = faultString(string(raw))
	}
	var out nodeOutput
	record := true
	switch {
	case code == 0 || code >= 500:
		out.Unknown = true
		op.Return = math.MaxInt64
		record = in.Kind != "read"
	case in.Kind == "read" && code == 200:
		var n struct {
			Description string `json:"description"`
			State       string `json:"provision_state"`
			Target      string `json:"target_provision_state"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			code, record = -1, false
		}
		out.Description, out.State, out.Target = n.Description, n.State, n.Target
	case in.Kind == "describe" && code == 200, in.Kind == "verb" && code == 202:
	case in.Kind == "verb" && code == 400:
		if s := stateRefusal.FindStringSubmatch(meta.Msg); s != nil {
			out.Refused, out.State = true, s[1]
		} else {
			record = false
		}
	default:
		record = false
	}
	op.Output, op.Metadata = out, meta
	h.mu.Lock()
	h.all = append(h.all, op)
	if record {
		h.ops = append(h.ops, op)
	} else {
		h.dropped++
	}
	h.mu.Unlock()
	return code, out, retry
}

// history is what was recorded, less the open describes whose value
// no read saw: had one taken effect, it was overwritten unseen (no read
// between it and the next write, or none after it), so the history
// with it is linearizable exactly when the history without it is; left
// out, the checker need not try it at every place.
func (h *nodeHistory) history() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[[2]string]bool{}
	for _, op := range h.ops {
		if in := op.Input.(nodeInput); in.Kind == "read" {
			seen[[2]string{in.Node, op.Output.(nodeOutput).Description}] = true
		}
	}
	var out []porcupine.Operation
	for _, op := range h.ops {
		in := op.Input.(nodeInput)
		if in.Kind == "describe" && op.Output.(nodeOutput).Unknown && !seen[[2]string{in.Node, in.Value}] {
			continue
		}
		out = append(out, op)
	}
	return out
}

// opCounts tells what a history holds.
type opCounts struct{ reads, writes, verbs, refused, unknown int }

func countOps(ops []porcupine.Operation) opCounts {
	var c opCounts
	for _, op := range ops {
		in, out := op.Input.(nodeInput), op.Output.(nodeOutput)
		switch {
		case out.Unknown:
			c.unknown++
		case out.Refused:
			c.refused++
		case in.Kind == "read":
			c.reads++
		case in.Kind == "describe":
			c.writes++
		default:
			c.verbs++
		}
	}
	return c
}

// TestNodeModel checks the model itself on histories made by hand: what
// a linearizable cluster may answer passes, and a stale read, a second
// compare-and-set from the same state, a refusal in a state the node
// was not in and a lost write are refused (Illegal).
func TestNodeModel(t *testing.T) {
	t.Parallel()
	model := nodeModel(map[string]nodeState{"n": {State: "manageable"}})
	op := func(cl int, call, ret int64, in nodeInput, out nodeOutput) porcupine.Operation {
		return porcupine.Operation{ClientId: cl, Input: in, Call: call, Output: out, Return: ret}
	}
	read := func(d, s string) (nodeInput, nodeOutput) {
		return nodeInput{Node: "n", Kind: "read"}, nodeOutput{Description: d, State: s}
	}
	r := func(cl int, call, ret int64, d, s string) porcupine.Operation {
		in, out := read(d, s)
		return op(cl, call, ret, in, out)
	}
	desc := func(v string) nodeInput { return nodeInput{Node: "n", Kind: "describe", Value: v} }
	verb := func(v string) nodeInput { return nodeInput{Node: "n", Kind: "verb", Verb: v} }
	open := int64(math.MaxInt64)
	for _, c := range []struct {
		name string
		want porcupine.CheckResult
		h    []porcupine.Operation
	}{
		{"a read of the start", porcupine.Ok, []porcupine.Operation{r(0, 0, 1, "", "manageable")}},
		{"a read after a write sees it", porcupine.Ok, []porcupine.Operation{
			op(0, 0, 1, desc("a"), nodeOutput{}), r(1, 2, 3, "a", "manageable")}},
		{"a stale read after a write", porcupine.Illegal, []porcupine.Operation{
			op(0, 0, 1, desc("a"), nodeOutput{}), r(1, 2, 3, "", "manageable")}},
		{"a read concurrent with a write sees either", porcupine.Ok, []porcupine.Operation{
			op(0, 0, 10, desc("a"), nodeOutput{}), r(1, 1, 2, "", "manageable"), r(2, 3, 4, "a", "manageable")}},
		{"a read going back to the old value", porcupine.Illegal, []porcupine.Operation{
			op(0, 0, 10, desc("a"), nodeOutput{}), r(1, 1, 2, "a", "manageable"), r(2, 3, 4, "", "manageable")}},
		{"provide then a read of available", porcupine.Ok, []porcupine.Operation{
			op(0, 0, 1, verb("provide"), nodeOutput{}), r(1, 2, 3, "", "available")}},
		{"a stale provision state after provide", porcupine.Illegal, []porcupine.Operation{
			op(0, 0, 1, verb("provide"), nodeOutput{}), r(1, 2, 3, "", "manageable")}},
		{"two concurrent provides, one refused", porcupine.Ok, []porcupine.Operation{
			op(0, 0, 5, verb("provide"), nodeOutput{}), op(1, 1, 6, verb("provide"), nodeOutput{Refused: true, State: "available"})}},
		{"two provides both accepted from manageable", porcupine.Illegal, []porcupine.Operation{
			op(0, 0, 5, verb("provide"), nodeOutput{}), op(1, 1, 6, verb("provide"), nodeOutput{})}},
		{"provide, manage, provide", porcupine.Ok, []porcupine.Operation{
			op(0, 0, 1, verb("provide"), nodeOutput{}), op(1, 2, 3, verb("manage"), nodeOutput{}), op(0, 4, 5, verb("provide"), nodeOutput{})}},
		{"a refusal in a state the node had left", porcupine.Illegal, []porcupine.Operation{
			op(0, 0, 1, verb("provide"), nodeOutput{}), op(1, 2, 3, verb("provide"), nodeOutput{Refused: true, State: "manageable"})}},
		{"an open provide seen later", porcupine.Ok, []porcupine.Operation{
			op(0, 0, open, verb("provide"), nodeOutput{Unknown: true}), r(1, 10, 11, "", "manageable"), r(1, 12, 13, "", "available")}},
		{"an open provide that never took effect", porcupine.Ok, []porcupine.Operation{
			op(0, 0, open, verb("provide"), nodeOutput{Unknown: true}), r(1, 10, 11, "", "manageable")}},
		{"an open provide does not take effect before its call", porcupine.Illegal, []porcupine.Operation{
			r(1, 0, 1, "", "available"), op(0, 2, open, verb("provide"), nodeOutput{Unknown: true})}},
		{"an open provide seen, then undone by nobody", porcupine.Illegal, []porcupine.Operation{
			op(0, 0, open, verb("provide"), nodeOutput{Unknown: true}), r(1, 10, 11, "", "available"), r(1, 12, 13, "", "manageable")}},
		{"an open write seen late", porcupine.Ok, []porcupine.Operation{
			op(0, 0, open, desc("a"), nodeOutput{Unknown: true}), r(1, 10, 11, "", "manageable"), r(1, 12, 13, "a", "manageable")}},
		{"a target left on the node", porcupine.Illegal, []porcupine.Operation{
			op(0, 0, 1, nodeInput{Node: "n", Kind: "read"}, nodeOutput{State: "manageable", Target: "available"})}},
		{"nodes apart: a write to another node changes nothing here", porcupine.Illegal, []porcupine.Operation{
			op(0, 0, 1, nodeInput{Node: "m", Kind: "describe", Value: "a"}, nodeOutput{}), r(1, 2, 3, "a", "manageable")}},
	} {
		if got := porcupine.CheckOperationsTimeout(model, c.h, 10*time.Second); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// TestClusterLinearizable records concurrent writes and reads of one
// node's description by four clients, each request through a member
// picked in turn, while the leader is killed with kill -9, and checks
// the history with porcupine (nodeModel): linearizable.
func TestClusterLinearizable(t *testing.T) {
	t.Parallel()
	ms, htpasswd := testrig.NewCluster(t, 3)
	peers := testrig.Peers(ms)
	for _, m := range ms {
		m.Start(t, peers, htpasswd)
	}
	leader := testrig.Settled(t, ms, 3, time.Minute)
	c := ms[0].Client(t)
	if code := c.Do("POST", "/v1/sites", map[string]string{"name": "site1"}, nil); code != 201 {
		t.Fatalf("site: %d", code)
	}
	id := c.CreateNode("reg", "site1", nil)
	h := newNodeHistory(5 * time.Second)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	killed := make(chan struct{})
	for cl := 0; cl < 4; cl++ {
		wg.Add(1)
		go func(cl int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				m := ms[(cl+i)%3]
				select {
				case <-killed:
					if m.Name == leader {
						m = ms[(cl+i+1)%3]
						if m.Name == leader {
							m = ms[(cl+i+2)%3]
						}
					}
				default:
				}
				if i%2 == 0 {
					h.do(cl, m, nodeInput{Node: id, Kind: "describe", Value: fmt.Sprintf("c%d-%d", cl, i)})
				} else {
					h.do(cl, m, nodeInput{Node: id, Kind: "read"})
				}
				time.Sleep(10 * time.Millisecond)
			}
		}(cl)
	}
	time.Sleep(2 * time.Second)
	for _, m := range ms {
		if m.Name == leader {
			_ = m.Proc.Cmd.Process.Signal(syscall.SIGKILL)
			<-m.Proc.Done
		}
	}
	close(killed)
	time.Sleep(5 * time.Second)
	close(stop)
	wg.Wait()
	ops := h.history()
	n := countOps(ops)
	t.Logf("%d operations (%d acknowledged writes, %d reads, %d open) over a kill -9 of leader %s", len(ops), n.writes, n.reads, n.unknown, leader)
	if n.writes < 10 || n.reads < 10 {
		t.Fatalf("too few operations to tell: %d writes, %d reads", n.writes, n.reads)
	}
	model := nodeModel(map[string]nodeState{id: {State: "enroll"}})
	if res := porcupine.CheckOperationsTimeout(model, ops, 60*time.Second); res != porcupine.Ok {
		t.Fatalf("the history is %s, want linearizable", res)
	}
	// The check is not vacuous: the same history with a stale read at
	// its end (the node's first, empty description) is refused.
	end := h.now()
	stale := append(ops, porcupine.Operation{ClientId: 4, Input: nodeInput{Node: id, Kind: "read"}, Call: end,
		Output: nodeOutput{State: "enroll"}, Return: end + 1})
	if res := porcupine.CheckOperationsTimeout(model, stale, 60*time.Second); res != porcupine.Illegal {
		t.Fatalf("a stale read at the end: %s, want Illegal", res)
	}
}
