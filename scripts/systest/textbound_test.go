package systest

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/bmedge/bmedge/agent"
	"github.com/bmedge/bmedge/coordinator/fsm"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestLongErrorsBounded (issue 30, acceptance 3): a simulated ramdisk
// whose step fails with a 1 MB error, and a simulated BMC whose
// validation fails with a 1 MB error: the node's last_error and every
// history event hold at most fsm.MaxText bytes, marked as cut, with the
// length of what was sent.
func TestLongErrorsBounded(t *testing.T) {
	const size = 1_000_000
	long := func(who string) string {
		return who + " failed: " + strings.Repeat("é", size/2-len(who)/2-6)
	}
	c := testrig.Coordinator(t, testrig.Options{})
	testrig.Site(t, c, "ramdisk1", agent.SimOptions{Nodes: 1, StepDuration: 20 * time.Millisecond,
		FailStep: "erase_devices_metadata", FailText: long("the ramdisk")})
	testrig.Site(t, c, "bmc1", agent.SimOptions{Nodes: 1, FailValidate: long("the BMC")})
	cl := testrig.NewClient(t, c)
	rd := cl.CreateNode("rd", "ramdisk1", nil)
	bmc := cl.CreateNode("bmc", "bmc1", nil)
	cl.MustVerb(rd, "manage", nil)
	cl.MustVerb(bmc, "manage", nil)
	if n := cl.WaitRest(rd, 30*time.Second); n.State != "manageable" {
		t.Fatalf("manage: %q %q", n.State, n.LastError)
	}
	cl.MustVerb(rd, "provide", nil)
	for _, tc := range []struct{ id, state, who string }{{rd, "clean failed", "the ramdisk"}, {bmc, "enroll", "the BMC"}} {
		n := cl.WaitRest(tc.id, 60*time.Second)
		if n.State != tc.state || !strings.Contains(n.LastError, tc.who+" failed: éé") {
			t.Fatalf("%s: %q, last_error %.200q; want %s with its error", tc.who, n.State, n.LastError, tc.state)
		}
		// The note tells the length of the text the site sent (the
		// agent may have put a few words before it).
		var sent, kept int
		if i := strings.Index(n.LastError, "… [cut: "); i >= 0 {
			fmt.Sscanf(n.LastError[i+len("… [cut: "):], "%d bytes, first %d kept]", &sent, &kept)
		}
		if len(n.LastError) > fsm.MaxText || sent < size-10 || kept <= 0 || strings.Count(n.LastError, "[cut: ") != 1 || !utf8.ValidString(n.LastError) {
			t.Errorf("%s: last_error of %d bytes (bound %d), tail %q", tc.who, len(n.LastError), fsm.MaxText, n.LastError[max(0, len(n.LastError)-80):])
		}
		var h struct {
			History []map[string]any `json:"history"`
		}
		if code := cl.Do("GET", "/v1/nodes/"+tc.id+"/history", nil, &h); code != 200 {
			t.Fatalf("history: %d", code)
		}
		found := false
		for _, e := range h.History {
			ev := fmt.Sprint(e["event"])
			if len(ev) > fsm.MaxText {
				t.Errorf("%s: a history event of %d bytes", tc.who, len(ev))
			}
			if strings.Contains(ev, tc.who+" failed") {
				found = found || strings.Contains(ev, "[cut: ")
			}
		}
		if !found {
			t.Errorf("%s: no history event holds the cut error", tc.who)
		}
		t.Logf("%s: last_error %d bytes, ends %q", tc.who, len(n.LastError), n.LastError[strings.LastIndex(n.LastError, " … "):])
	}
}
