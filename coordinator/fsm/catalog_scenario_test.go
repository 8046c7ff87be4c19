package fsm

import (
	"encoding/json"
	"fmt"
	"strings"
)

// catalogArgs reads a scenario verb's deploy templates (templates=JSON, a
// list of deploy template documents) and runbook (runbook=JSON, a runbook
// document), checked as the API checks them; the runbook's steps become
// the verb's clean or service steps, as the API makes them.
func (s *scenario) catalogArgs(o opts, req *VerbRequest) {
	if v, ok := o["templates"]; ok {
		var docs []map[string]any
		if err := json.Unmarshal([]byte(v), &docs); err != nil {
			s.fatalf("templates: %v", err)
		}
		for _, d := range docs {
			t, err := ParseDeployTemplate(d)
			if err != nil {
				s.fatalf("templates: %v", err)
			}
			req.Templates = append(req.Templates, t)
		}
	}
	if v, ok := o["runbook"]; ok {
		var doc map[string]any
		if err := json.Unmarshal([]byte(v), &doc); err != nil {
			s.fatalf("runbook: %v", err)
		}
		rb, err := ParseRunbook(doc)
		if err != nil {
			s.fatalf("runbook: %v", err)
		}
		req.Runbook, req.DisableRamdisk = rb.Name, rb.DisableRamdisk
		if req.Verb == Service {
			req.ServiceSteps = rb.OrderedSteps()
		} else {
			req.CleanSteps = rb.OrderedSteps()
		}
	}
}

// setTraits sets the node's traits from a JSON list, as PUT
// /v1/nodes/{node}/traits.
func (s *scenario) setTraits(n *Node, v string, b *strings.Builder) {
	var l []string
	if err := json.Unmarshal([]byte(v), &l); err != nil {
		s.fatalf("traits: %v", err)
	}
	t, err := SetTraits(n.Ident(), l)
	if err != nil {
		fmt.Fprintf(b, "refused 400: %v\n", err)
		return
	}
	n.Traits = t
}
