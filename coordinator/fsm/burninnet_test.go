package fsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/drivers"
)

// TestBurninNetworkArgs: the step's args get the pair (partner UUID and
// key) from Config.BurninPair, in a copy (the operator's args, which
// clean_step shows, stay without it); a bad config, a partner that is
// gone and a machine that cannot pair are errors.
func TestBurninNetworkArgs(t *testing.T) {
	n := &Node{UUID: "u-a", Name: "a", Site: "s1"}
	args := map[string]any{drivers.ArgBurninNetworkConfig: map[string]any{"role": "writer", "partner": "10.0.0.2", "partner_node": "b"}}
	m := New(Config{BurninPair: func(n *Node, p string) (string, string, error) {
		if p != "b" {
			return "", "", errors.New("no such partner")
		}
		return "u-b", "k-ab", nil
	}})
	out, err := m.burninNetworkArgs(n, args)
	if err != nil {
		t.Fatal(err)
	}
	pair, _ := out[drivers.ArgBurninNetworkPair].(map[string]any)
	if pair["node"] != "u-a" || pair["partner_node"] != "u-b" || pair["secret"] != "k-ab" {
		t.Fatalf("pair: %v", pair)
	}
	if _, leaked := args[drivers.ArgBurninNetworkPair]; leaked {
		t.Fatal("the operator's args got the pair")
	}
	args[drivers.ArgBurninNetworkConfig] = map[string]any{"role": "writer", "partner": "10.0.0.2", "partner_node": "c"}
	if _, err := m.burninNetworkArgs(n, args); err == nil || err.Error() != "no such partner" {
		t.Fatalf("gone partner: %v", err)
	}
	if _, err := m.burninNetworkArgs(n, map[string]any{}); err == nil || !strings.Contains(err.Error(), "agent_burnin_fio_network_config is required") {
		t.Fatalf("no config: %v", err)
	}
	if _, err := New(Config{}).burninNetworkArgs(n, args); err == nil || !strings.Contains(err.Error(), "cannot pair") {
		t.Fatalf("no BurninPair: %v", err)
	}
}
