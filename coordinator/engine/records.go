package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// A node record is rewritten on every transition: ~28 times for one
// node's manage, provide, deploy and undeploy. Written whole, a record in
// the middle of an operation was 1.6–3 KB of JSON, most of it the same
// in every write of that operation: the operation's plan (every action
// with its step's declaration, ~0.7–1.1 KB) and copies, inside the
// pending command, of fields the record holds anyway (its site, node,
// agent token, deadline, id, topic). Every byte is encoded, encrypted,
// synced and (in a cluster) sealed, replicated and applied by each
// member, so the record as stored leaves them out:
//
//   - A plan is stored once per distinct content (store.PlanCatalogPrefix,
//     named by a digest) and the record names it (op.plan_ref). Nodes that
//     run the same verb with the same steps name one record. The engine
//     counts the stored records that name each plan and deletes a plan in
//     the batch that drops its last reference. A node's plan is never
//     changed in place (the fsm replaces the slice), so a commit of a node
//     whose plan is the one last stored costs a comparison, not a digest;
//     test binaries check that against the content at every commit.
//   - The pending command's copies are left out when they equal the
//     record's own fields, and "elided" says which were left out, so that
//     reading the record back gives the command byte for byte.
//
// Records written before this (whole plan and command inline) load as
// they are and are rewritten in the short form at their next change.

// storedNode is a node record as stored: the embedded node's step lists
// are shadowed (never written inline) and named by StepsRef instead, and
// its operation and pending command are the short forms.
type storedNode struct {
	*fsm.Node
	CachedCleanSteps  []drivers.Step `json:"cached_clean_steps,omitempty"`
	CachedDeploySteps []drivers.Step `json:"cached_deploy_steps,omitempty"`
	StepsRef          string         `json:"steps_ref,omitempty"`
	Op                *storedOp      `json:"op,omitempty"`
	Pending           *storedCommand `json:"pending,omitempty"`
}

// storedOp is an operation whose plan is named by PlanRef (Plan is
// inline only in records written before plans were stored apart).
type storedOp struct {
	*fsm.Operation
	Plan    []fsm.Action `json:"plan,omitempty"`
	PlanRef string       `json:"plan_ref,omitempty"`
}

// storedCommand is a pending command without the copies that Elided
// names.
type storedCommand struct {
	*fsm.Command
	ID     string            `json:"id,omitempty"`
	Topic  string            `json:"topic,omitempty"`
	Msg    *protocol.Message `json:"msg"`
	Elided elided            `json:"elided,omitempty"`
}

// elided names the fields of a pending command left out of its record,
// each equal to a field of the node.
type elided uint8

const (
	elidedID       elided = 1 << iota // Command.ID: Msg.ID
	elidedTopic                       // Command.Topic: the node's command topic
	elidedSite                        // Msg.Site: Node.Site
	elidedNode                        // Msg.Node: Node.UUID
	elidedToken                       // Msg.Token: Node.AgentToken
	elidedDeadline                    // Msg.Deadline: Node.Deadline
)

// shortCommand is c without its copies of n's fields.
func shortCommand(n *fsm.Node, c *fsm.Command) *storedCommand {
	if c == nil {
		return nil
	}
	s := &storedCommand{Command: c, ID: c.ID, Topic: c.Topic, Msg: c.Msg}
	if c.Msg == nil {
		return s
	}
	m := *c.Msg
	if c.ID != "" && c.ID == m.ID {
		s.ID, s.Elided = "", s.Elided|elidedID
	}
	if c.Topic != "" && c.Topic == protocol.NodeCmdTopic(n.Site, n.UUID) {
		s.Topic, s.Elided = "", s.Elided|elidedTopic
	}
	if m.Site != "" && m.Site == n.Site {
		m.Site, s.Elided = "", s.Elided|elidedSite
	}
	if m.Node != "" && m.Node == n.UUID {
		m.Node, s.Elided = "", s.Elided|elidedNode
	}
	if m.Token != "" && m.Token == n.AgentToken {
		m.Token, s.Elided = "", s.Elided|elidedToken
	}
	if !m.Deadline.IsZero() && m.Deadline.Equal(n.Deadline) && m.Deadline.Location() == n.Deadline.Location() {
		m.Deadline, s.Elided = time.Time{}, s.Elided|elidedDeadline
	}
	s.Msg = &m
	return s
}

// fullCommand restores what shortCommand left out, from n (decoded from
// the same record).
func fullCommand(n *fsm.Node, s *storedCommand) (*fsm.Command, error) {
	if s == nil {
		return nil, nil
	}
	c := s.Command
	if c == nil {
		c = &fsm.Command{}
	}
	c.ID, c.Topic, c.Msg = s.ID, s.Topic, s.Msg
	if s.Elided == 0 {
		return c, nil
	}
	if c.Msg == nil {
		return nil, fmt.Errorf("node %s: its pending command names copies left out of a message it does not have", n.UUID)
	}
	e := s.Elided
	if e&elidedID != 0 {
		c.ID = c.Msg.ID
	}
	if e&elidedTopic != 0 {
		c.Topic = protocol.NodeCmdTopic(n.Site, n.UUID)
	}
	if e&elidedSite != 0 {
		c.Msg.Site = n.Site
	}
	if e&elidedNode != 0 {
		c.Msg.Node = n.UUID
	}
	if e&elidedToken != 0 {
		c.Msg.Token = n.AgentToken
	}
	if e&elidedDeadline != 0 {
		c.Msg.Deadline = n.Deadline
	}
	return c, nil
}

// planCats are the stored plans: how many stored node records name each,
// and what each node's stored record names. Only the engine loop uses
// them (under e.reg.mu), like the nodes.
type planCats struct {
	refs   map[string]int
	byNode map[string]planMark
	// loaded holds the stored plans while the nodes load.
	loaded map[string][]byte
}

// planMark is the plan a node's stored record names: the ref and the
// plan's slice (its backing array and length) when it was stored.
type planMark struct {
	data *fsm.Action
	n    int
	ref  string
}

func newPlanCats() *planCats {
	return &planCats{refs: map[string]int{}, byNode: map[string]planMark{}}
}

// verifyPlans makes every commit check that a plan taken as unchanged
// (same slice) still has the content stored under its ref: on in test
// binaries, where a plan changed in place would fail the test that did
// it.
var verifyPlans = testing.Testing()

// planRef is the ref of n's plan for its record in t's batch: a plan not
// stored yet joins the batch, and a plan no stored record names any more
// leaves it.
func (p *planCats) planRef(t *tx, n *fsm.Node) (string, error) {
	old := p.byNode[n.UUID]
	var mark planMark
	if n.Op != nil && len(n.Op.Plan) > 0 {
		mark = planMark{data: unsafe.SliceData(n.Op.Plan), n: len(n.Op.Plan)}
		if old.ref != "" && old.data == mark.data && old.n == mark.n && !verifyPlans {
			return old.ref, nil
		}
		b, err := json.Marshal(n.Op.Plan)
		if err != nil {
			return "", err
		}
		mark.ref = contentRef(b)
		if verifyPlans && old.ref != "" && old.data == mark.data && old.n == mark.n && old.ref != mark.ref {
			panic(fmt.Sprintf("node %s: its operation's plan was changed in place (stored as %s, now %s); replace the slice instead", n.UUID, old.ref, mark.ref))
		}
		if mark.ref != old.ref {
			if p.refs[mark.ref] == 0 {
				t.batch.Set(store.PlanCatalogPrefix+mark.ref, b)
			}
			p.refs[mark.ref]++
		}
	}
	if old.ref != "" && old.ref != mark.ref {
		p.release(t, old.ref)
	}
	if mark.ref == "" {
		delete(p.byNode, n.UUID)
	} else {
		p.byNode[n.UUID] = mark
	}
	return mark.ref, nil
}

// release drops one reference to ref; the last one deletes the plan.
func (p *planCats) release(t *tx, ref string) {
	if p.refs[ref]--; p.refs[ref] <= 0 {
		delete(p.refs, ref)
		t.batch.Delete(store.PlanCatalogPrefix + ref)
	}
}

// dropNode releases what the deleted node's record named.
func (p *planCats) dropNode(t *tx, uuid string) {
	if old, ok := p.byNode[uuid]; ok {
		delete(p.byNode, uuid)
		p.release(t, old.ref)
	}
}

// encodeNode is a node's record; a new step catalogue or plan it refers
// to joins the same batch, and a plan it no longer refers to may leave
// it.
func (e *Engine) encodeNode(t *tx, n *fsm.Node) ([]byte, error) {
	ref, fresh, err := e.reg.cats.intern(n)
	if err != nil {
		return nil, err
	}
	if fresh != nil {
		t.batch.Set(store.StepCatalogPrefix+ref, fresh)
	}
	planRef, err := e.reg.plans.planRef(t, n)
	if err != nil {
		return nil, err
	}
	s := storedNode{Node: n, StepsRef: ref, Pending: shortCommand(n, n.Pending)}
	if n.Op != nil {
		s.Op = &storedOp{Operation: n.Op, PlanRef: planRef}
		if planRef == "" {
			s.Op.Plan = n.Op.Plan
		}
	}
	return json.Marshal(s)
}

// recordFormat is the form of the records this version writes, kept
// under formatKey: 2 since plans are stored apart and pending commands
// short. Versions before it read neither (and had no format key); a
// later version that writes a form this one cannot read raises it, and
// this one then refuses the data folder rather than misread it.
const (
	recordFormat = 2
	formatKey    = store.MetaPrefix + "record_format"
)

// checkFormat refuses a data folder of a later record format and marks
// it with this one.
func (e *Engine) checkFormat() error {
	v, found, err := e.st.Get(formatKey)
	if err != nil {
		return err
	}
	have := 0
	if found {
		if have, err = strconv.Atoi(string(v)); err != nil || have < 1 {
			return fmt.Errorf("the data folder's record format %q is not a number: the database is damaged; restore a backup", v)
		}
	}
	if have > recordFormat {
		return fmt.Errorf("the data folder holds records of format %d, written by a later version of the coordinator; this one reads format %d and earlier: run the later version, or restore a backup taken by this one", have, recordFormat)
	}
	if have == recordFormat {
		return nil
	}
	var b store.Batch
	b.Set(formatKey, []byte(strconv.Itoa(recordFormat)))
	return e.write(&b)
}

// loadPlans reads the stored plans (before the nodes).
func (e *Engine) loadPlans() error {
	e.reg.plans.loaded = map[string][]byte{}
	return e.st.Scan(store.PlanCatalogPrefix, func(k string, v []byte) error {
		e.reg.plans.loaded[k[len(store.PlanCatalogPrefix):]] = append([]byte{}, v...)
		return nil
	})
}

// decodeNode reads a node record: inline lists and plan (older records)
// or refs.
func (e *Engine) decodeNode(v []byte) (*fsm.Node, error) {
	n := &fsm.Node{}
	s := storedNode{Node: n}
	if err := json.Unmarshal(v, &s); err != nil {
		return nil, err
	}
	n.CachedCleanSteps, n.CachedDeploySteps = s.CachedCleanSteps, s.CachedDeploySteps
	if s.StepsRef != "" {
		c, ok := e.reg.cats.byRef[s.StepsRef]
		if !ok {
			return nil, fmt.Errorf("node %s refers to step catalogue %s, which is not stored", n.UUID, s.StepsRef)
		}
		n.CachedCleanSteps, n.CachedDeploySteps = c.Clean, c.Deploy
	}
	n.Op = nil
	if s.Op != nil {
		n.Op = s.Op.Operation
		if n.Op == nil {
			n.Op = &fsm.Operation{}
		}
		n.Op.Plan = s.Op.Plan
		if r := s.Op.PlanRef; r != "" {
			b, ok := e.reg.plans.loaded[r]
			if !ok {
				return nil, fmt.Errorf("node %s refers to plan %s, which is not stored", n.UUID, r)
			}
			if err := json.Unmarshal(b, &n.Op.Plan); err != nil {
				return nil, fmt.Errorf("corrupt plan %s: %w", r, err)
			}
			e.reg.plans.refs[r]++
			e.reg.plans.byNode[n.UUID] = planMark{data: unsafe.SliceData(n.Op.Plan), n: len(n.Op.Plan), ref: r}
		}
	}
	p, err := fullCommand(n, s.Pending)
	if err != nil {
		return nil, err
	}
	n.Pending = p
	return n, nil
}

// dropUnusedPlans deletes, after the nodes are loaded, the stored plans
// no node refers to (none should be: a plan leaves with its last
// reference) and forgets the loaded plans.
func (e *Engine) dropUnusedPlans() error {
	var b store.Batch
	for ref := range e.reg.plans.loaded {
		if e.reg.plans.refs[ref] == 0 {
			b.Delete(store.PlanCatalogPrefix + ref)
		}
	}
	e.reg.plans.loaded = nil
	if b.Len() == 0 {
		return nil
	}
	return e.write(&b)
}
