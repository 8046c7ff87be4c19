package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"unsafe"

	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/coordinator/store"
	"github.com/bmedge/bmedge/drivers"
)

// The steps a node's ramdisk offered at hello (fsm.Node.CachedCleanSteps
// and CachedDeploySteps) are the same lists for every node booted with
// one ramdisk build on one kind of hardware, and they are never changed
// in place: the fsm replaces them at the next hello. A node record is
// rewritten on every transition, so carrying the lists in each record
// (13 clean steps: ~1.3 KB) made every commit, the value log and its
// garbage collection that much larger. Instead a record names its lists
// by a digest (steps_ref) and each distinct pair of lists is stored once
// (store.StepCatalogPrefix). In memory, nodes with equal lists share one
// copy. Records written before this kept their lists inline; they load
// as they are and are rewritten with a reference at their next change.

// stepCatalog is one stored pair of lists.
type stepCatalog struct {
	Clean  []drivers.Step `json:"clean,omitempty"`
	Deploy []drivers.Step `json:"deploy,omitempty"`
}

// listKey identifies a pair of lists in memory by their backing arrays.
type listKey struct{ clean, deploy *drivers.Step }

func keyOf(n *fsm.Node) listKey {
	return listKey{unsafe.SliceData(n.CachedCleanSteps), unsafe.SliceData(n.CachedDeploySteps)}
}

// stepCats are the known catalogues. Only the engine loop uses them
// (under e.reg.mu), like the nodes.
type stepCats struct {
	byRef map[string]*stepCatalog
	// byKey maps the shared (canonical) lists of each catalogue to its
	// ref, so that a commit of a node whose lists are already shared
	// costs a map lookup, not a digest.
	byKey map[listKey]string
}

func newStepCats() *stepCats {
	return &stepCats{byRef: map[string]*stepCatalog{}, byKey: map[listKey]string{}}
}

func (s *stepCats) add(ref string, c *stepCatalog) {
	s.byRef[ref] = c
	s.byKey[listKey{unsafe.SliceData(c.Clean), unsafe.SliceData(c.Deploy)}] = ref
}

// intern returns n's ref, replacing n's lists by the shared copy of equal
// content; fresh is the catalogue's record when it is new (to be stored
// in the same batch as the node). A node without lists has no ref.
func (s *stepCats) intern(n *fsm.Node) (ref string, fresh []byte, err error) {
	if len(n.CachedCleanSteps) == 0 && len(n.CachedDeploySteps) == 0 {
		return "", nil, nil
	}
	if r, ok := s.byKey[keyOf(n)]; ok {
		if c := s.byRef[r]; len(c.Clean) == len(n.CachedCleanSteps) && len(c.Deploy) == len(n.CachedDeploySteps) {
			return r, nil, nil
		}
	}
	c := &stepCatalog{Clean: n.CachedCleanSteps, Deploy: n.CachedDeploySteps}
	b, err := json.Marshal(c)
	if err != nil {
		return "", nil, err
	}
	ref = contentRef(b)
	if have, ok := s.byRef[ref]; ok {
		n.CachedCleanSteps, n.CachedDeploySteps = have.Clean, have.Deploy
		return ref, nil, nil
	}
	s.add(ref, c)
	return ref, b, nil
}

// contentRef names a stored catalogue record (step lists, plans) by its
// content: the first 128 bits of its SHA-256, in hex.
func contentRef(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// loadStepCats reads the stored catalogues (before the nodes).
func (e *Engine) loadStepCats() error {
	return e.st.Scan(store.StepCatalogPrefix, func(k string, v []byte) error {
		var c stepCatalog
		if err := json.Unmarshal(v, &c); err != nil {
			return fmt.Errorf("corrupt step catalogue %s: %w", k, err)
		}
		e.reg.cats.add(k[len(store.StepCatalogPrefix):], &c)
		return nil
	})
}

// dropUnusedStepCats deletes, after the nodes are loaded, the catalogues
// no node refers to any more (their ramdisks were replaced), so that
// they do not pile up over the years.
func (e *Engine) dropUnusedStepCats() error {
	used := map[string]bool{}
	for _, n := range e.reg.nodes {
		if r, ok := e.reg.cats.byKey[keyOf(n)]; ok {
			used[r] = true
		}
	}
	var b store.Batch
	for ref, c := range e.reg.cats.byRef {
		if !used[ref] {
			b.Delete(store.StepCatalogPrefix + ref)
			delete(e.reg.cats.byKey, listKey{unsafe.SliceData(c.Clean), unsafe.SliceData(c.Deploy)})
			delete(e.reg.cats.byRef, ref)
		}
	}
	if b.Len() == 0 {
		return nil
	}
	return e.write(&b)
}
