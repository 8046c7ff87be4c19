package systest

import (
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestDeletedNodeFreesItsSlot: a simulated site of one node; once that
// node is deleted at the coordinator, its edge agent forgets it (the
// forget command), so another node can take the slot. Before, the second
// node failed to manage with "all are taken".
func TestDeletedNodeFreesItsSlot(t *testing.T) {
	c := testrig.Coordinator(t, testrig.Options{})
	cl := testrig.NewClient(t, c)
	testrig.Site(t, c, "s1", agent.SimOptions{Nodes: 1})
	for i, name := range []string{"first", "second", "third"} {
		id := cl.CreateNode(name, "s1", nil)
		cl.MustVerb(id, "manage", nil)
		if n := cl.WaitRest(id, 20*time.Second); n.State != "manageable" {
			t.Fatalf("node %d (%s) of a one-node simulated site: %q (%s); want manageable, its predecessor's slot given back", i+1, name, n.State, n.LastError)
		}
		if code := cl.Do("DELETE", "/v1/nodes/"+id, nil, nil); code != 204 {
			t.Fatalf("delete %s: %d", name, code)
		}
	}
}
