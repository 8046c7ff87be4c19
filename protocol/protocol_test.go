package protocol

import (
	"strings"
	"testing"
	"time"
)

func TestDecodeRejectsWithReason(t *testing.T) {
	cases := []struct {
		name, in, want string
	}{
		{"not json", `{"v":1,`, "not valid JSON"},
		{"old version", `{"v":0,"kind":"result","id":"a"}`, "version 0"},
		{"no kind", `{"v":1,"id":"a"}`, "no kind"},
		{"unknown kind", `{"v":1,"id":"a","kind":"gossip"}`, `unknown kind "gossip"`},
		{"no id", `{"v":1,"kind":"result","command_id":"c","ok":true,"node":"n"}`, `"id"`},
		{"result without command", `{"v":1,"kind":"result","id":"a","ok":true,"node":"n"}`, "command_id"},
		{"failure without text", `{"v":1,"kind":"result","id":"a","command_id":"c","node":"n"}`, "without an error text"},
		{"command without deadline", `{"v":1,"kind":"command","id":"a","action":"validate","node":"n"}`, "deadline"},
		{"bad power state", `{"v":1,"kind":"command","id":"a","action":"power","node":"n","deadline":"2030-01-01T00:00:00Z","args":{"state":"melt"}}`, `state "melt"`},
		{"bad boot device on power", `{"v":1,"kind":"command","id":"a","action":"power","node":"n","deadline":"2030-01-01T00:00:00Z","args":{"state":"rebooted","boot_device":"floppy"}}`, "boot_device floppy"},
		{"steps not starting with the step", `{"v":1,"kind":"command","id":"a","action":"oob_step","node":"n","deadline":"2030-01-01T00:00:00Z","step":{"interface":"deploy","step":"x"},"steps":[{"interface":"deploy","step":"y"}]}`, "first step is not its step"},
		{"steps without a name", `{"v":1,"kind":"command","id":"a","action":"oob_step","node":"n","deadline":"2030-01-01T00:00:00Z","step":{"interface":"deploy","step":"x"},"steps":[{"interface":"deploy","step":"x"},{"interface":"deploy"}]}`, "step 2 lacks interface or name"},
		{"steps in band", `{"v":1,"kind":"command","id":"a","action":"run_step","node":"n","token":"t","deadline":"2030-01-01T00:00:00Z","step":{"interface":"deploy","step":"x"},"steps":[{"interface":"deploy","step":"x"}]}`, "only oob_step runs several"},
		{"too many steps", `{"v":1,"kind":"command","id":"a","action":"oob_step","node":"n","deadline":"2030-01-01T00:00:00Z","step":{"interface":"d","step":"x"},"steps":[` + strings.Repeat(`{"interface":"d","step":"x"},`, MaxOOBSteps) + `{"interface":"d","step":"x"}]}`, "at most 8"},
		{"unknown action", `{"v":1,"kind":"command","id":"a","action":"dance","node":"n","deadline":"2030-01-01T00:00:00Z"}`, `unknown action "dance"`},
		{"empty plan", `{"v":1,"kind":"command","id":"a","action":"run_plan","node":"n","deadline":"2030-01-01T00:00:00Z"}`, "has 0 steps; want 1 to 100"},
		{"plan of another node", `{"v":1,"kind":"command","id":"a","action":"run_plan","node":"n","deadline":"2030-01-01T00:00:00Z","plan":[{"v":1,"kind":"command","id":"b","action":"run_step","node":"m","token":"t","span_seconds":9,"deadline":"2030-01-01T00:00:00Z","step":{"interface":"deploy","step":"x"}}]}`, "same node"},
		{"plan step without a span", `{"v":1,"kind":"command","id":"a","action":"run_plan","node":"n","deadline":"2030-01-01T00:00:00Z","plan":[{"v":1,"kind":"command","id":"b","action":"run_step","node":"n","token":"t","deadline":"2030-01-01T00:00:00Z","step":{"interface":"deploy","step":"x"}}]}`, "with a span"},
		{"plan of a power command", `{"v":1,"kind":"command","id":"a","action":"run_plan","node":"n","deadline":"2030-01-01T00:00:00Z","plan":[{"v":1,"kind":"command","id":"b","action":"power","node":"n","span_seconds":9,"deadline":"2030-01-01T00:00:00Z","args":{"state":"power on"}}]}`, "not a run_step or oob_step"},
		{"plan step invalid", `{"v":1,"kind":"command","id":"a","action":"run_plan","node":"n","deadline":"2030-01-01T00:00:00Z","plan":[{"v":1,"kind":"command","id":"b","action":"run_step","node":"n","span_seconds":9,"deadline":"2030-01-01T00:00:00Z"}]}`, "step 1: run_step command \"b\" lacks a step"},
		{"stop without mode", `{"v":1,"kind":"command","id":"a","action":"stop_plan","node":"n","deadline":"2030-01-01T00:00:00Z","args":{"plan_id":"p"}}`, "want \"abort\" or \"finish\""},
		{"heartbeat without token", `{"v":1,"kind":"heartbeat","id":"a","node":"n"}`, `"token"`},
		{"progress out of range", `{"v":1,"kind":"heartbeat","id":"a","node":"n","token":"t","progress":2}`, "outside 0..1"},
		{"rescue refusal of an unknown kind", `{"v":1,"kind":"heartbeat","id":"a","node":"n","token":"t","rescue_refused":{"login-failed":3,"node-a1":1}}`, `unknown kind "node-a1"`},
		{"negative rescue refusals", `{"v":1,"kind":"heartbeat","id":"a","node":"n","token":"t","rescue_refused":{"sessions":-1}}`, "at least 0"},
		{"rescue refusals in a result", `{"v":1,"kind":"result","id":"a","command_id":"c","ok":true,"node":"n","rescue_refused":{"sessions":1}}`, "only a heartbeat does"},
		{"hello without boot id", `{"v":1,"kind":"hello","id":"a","node":"n"}`, "boot_id"},
		{"too big", `{"v":1,"x":"` + strings.Repeat("a", MaxMessageBytes) + `"}`, "larger than the limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode([]byte(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decode(%s): %v, want an error with %q", c.name, err, c.want)
			}
		})
	}
}

// TestRescueRefusedRoundTrip: a heartbeat's rescue refusals of every
// known kind come through.
func TestRescueRefusedRoundTrip(t *testing.T) {
	m := &Message{Kind: KindHeartbeat, ID: "h1", Node: "n1", Token: "t", RescueRefused: map[string]int64{}}
	for i, k := range RescueRefusalKinds {
		m.RescueRefused[k] = int64(i)
	}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || len(got.RescueRefused) != len(RescueRefusalKinds) || got.RescueRefused["sessions"] != m.RescueRefused["sessions"] {
		t.Fatalf("round trip: %+v %v", got, err)
	}
}

func TestRoundTrip(t *testing.T) {
	m := &Message{Kind: KindCommand, ID: "c1", Node: "n1", Site: "s1", Action: ActionPower, Deadline: time.Now().Add(time.Minute),
		Args: map[string]any{"state": PowerOn}}
	b, err := Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(b)
	if err != nil || got.ID != "c1" || got.Args["state"] != PowerOn || got.V != Version {
		t.Fatalf("round trip: %+v %v", got, err)
	}
}

func TestParseTopic(t *testing.T) {
	for _, c := range []struct{ topic, site, node, leaf string }{
		{NodeEvtTopic("s1", "n1"), "s1", "n1", "evt"},
		{NodeCmdTopic("s1", "n1"), "s1", "n1", "cmd"},
		{BMCCmdTopic("s2"), "s2", "", "bmc/cmd"},
		{SitePresenceTopic("s3"), "s3", "", "presence"},
	} {
		s, n, l, err := ParseTopic(c.topic)
		if err != nil || s != c.site || n != c.node || l != c.leaf {
			t.Errorf("ParseTopic(%s) = %s %s %s %v", c.topic, s, n, l, err)
		}
	}
	for _, bad := range []string{"bm/v2/site/s/bmc/cmd", "bm/v1/site/s/node/n/other", "bm/v1/site/s"} {
		if _, _, _, err := ParseTopic(bad); err == nil {
			t.Errorf("ParseTopic(%s) accepted", bad)
		}
	}
}
