package drivers

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The network burn-in (deploy.burnin_network) pairs two nodes of a site:
// IPA's static pairing {"role": "writer"|"reader", "partner": address},
// plus the partner's node so that the coordinator can hand both ramdisks
// the pair's key. The coordinator, the ramdisk and the simulator all read
// the arguments with NetworkBurninArgs.
const (
	// ArgBurninNetworkPairingTimeout is how long the writer waits for
	// its reader and the reader keeps trying to reach its writer (IPA's
	// name, there for its tooz pairing).
	ArgBurninNetworkPairingTimeout = "agent_burnin_fio_network_pairing_timeout"
	// ArgBurninNetworkPair is set by the coordinator, never by the
	// operator: {"node": UUID, "partner_node": UUID, "secret": hex}, the
	// pair's key. It is never shown (clean_step shows the operator's
	// args) and never stored outside the encrypted database.
	ArgBurninNetworkPair = "burnin_network_pair_secret"
)

// Defaults of the network burn-in.
const (
	// NetworkBurninPort is where the writer listens (IPA's fio port).
	NetworkBurninPort = 9000
	// DefaultNetworkBurninRuntime is IPA's seconds per direction.
	DefaultNetworkBurninRuntime = 21600
	// DefaultNetworkPairingTimeout is IPA's pairing timeout in seconds.
	DefaultNetworkPairingTimeout = 900
)

// Network burn-in roles (IPA's): the writer listens and writes first;
// the reader connects to its partner and reads first; then they swap.
const (
	NetworkRoleWriter = "writer"
	NetworkRoleReader = "reader"
)

// NetworkBurnin is a checked network burn-in configuration.
type NetworkBurnin struct {
	Role string
	// Partner is the partner's host:port (a port-less host means
	// NetworkBurninPort, as IPA's partner is a host name).
	Partner string
	// PartnerNode is the partner's node name or UUID, as given.
	PartnerNode    string
	Runtime        time.Duration
	PairingTimeout time.Duration
}

var networkConfigKeys = []string{"partner", "partner_node", "role"}

// NetworkBurninArgs reads and checks the arguments of deploy.burnin_network
// (as the clean step, completed from driver_info, gives them); every
// error names the argument or field and says what it wants.
func NetworkBurninArgs(args map[string]any) (NetworkBurnin, error) {
	var nb NetworkBurnin
	raw, ok := args[ArgBurninNetworkConfig]
	if !ok || raw == nil {
		return nb, fmt.Errorf("%s is required: {\"role\": \"writer\"|\"reader\", \"partner\": \"HOST:PORT\", \"partner_node\": \"NODE\"} in the step's args or the node's driver_info "+
			"(IPA's dynamic pairing through a tooz backend is not offered)", ArgBurninNetworkConfig)
	}
	cfg, ok := raw.(map[string]any)
	if s, isStr := raw.(string); isStr {
		if err := json.Unmarshal([]byte(s), &cfg); err != nil {
			return nb, fmt.Errorf("%s: %q is not a JSON object: %v", ArgBurninNetworkConfig, s, err)
		}
		ok = cfg != nil
	}
	if !ok {
		return nb, fmt.Errorf("%s: want an object {\"role\", \"partner\", \"partner_node\"}, got %T", ArgBurninNetworkConfig, raw)
	}
	for k := range cfg {
		if !slices.Contains(networkConfigKeys, k) {
			return nb, fmt.Errorf("%s: unknown field %q; it takes %s", ArgBurninNetworkConfig, k, strings.Join(networkConfigKeys, ", "))
		}
	}
	str := func(k string) (string, error) {
		v, ok := cfg[k].(string)
		if !ok || strings.TrimSpace(v) == "" {
			return "", fmt.Errorf("%s: field %q is missing or not a string", ArgBurninNetworkConfig, k)
		}
		return strings.TrimSpace(v), nil
	}
	var err error
	if nb.Role, err = str("role"); err != nil {
		return nb, fmt.Errorf("%w; want \"writer\" (listens on port %d, writes first) or \"reader\" (connects to partner, reads first)", err, NetworkBurninPort)
	}
	if nb.Role != NetworkRoleWriter && nb.Role != NetworkRoleReader {
		return nb, fmt.Errorf("%s: role %q: want \"writer\" (listens on port %d, writes first) or \"reader\" (connects to partner, reads first)", ArgBurninNetworkConfig, nb.Role, NetworkBurninPort)
	}
	p, err := str("partner")
	if err != nil {
		return nb, fmt.Errorf("%w; want the partner's HOST:PORT (the reader connects there; port %d when omitted)", err, NetworkBurninPort)
	}
	if nb.Partner, err = partnerAddress(p); err != nil {
		return nb, fmt.Errorf("%s: partner %q: %v", ArgBurninNetworkConfig, p, err)
	}
	if nb.PartnerNode, err = str("partner_node"); err != nil {
		return nb, fmt.Errorf("%w; want the partner's node name or UUID (the coordinator pairs the two nodes' ramdisks with a key of their own)", err)
	}
	rt, err := positiveSeconds(args, ArgBurninNetworkRuntime, DefaultNetworkBurninRuntime)
	if err != nil {
		return nb, err
	}
	pt, err := positiveSeconds(args, ArgBurninNetworkPairingTimeout, DefaultNetworkPairingTimeout)
	if err != nil {
		return nb, err
	}
	nb.Runtime, nb.PairingTimeout = rt, pt
	return nb, nil
}

// partnerAddress checks HOST[:PORT] and returns HOST:PORT.
func partnerAddress(p string) (string, error) {
	host, port, err := net.SplitHostPort(p)
	if err != nil {
		// A bare host (IPA's shape) or a bare IPv6 address.
		if strings.ContainsAny(p, "[]") || (strings.Count(p, ":") == 1) {
			return "", fmt.Errorf("want HOST:PORT, e.g. \"10.0.0.2:%d\"", NetworkBurninPort)
		}
		host, port = p, strconv.Itoa(NetworkBurninPort)
	}
	if host == "" || strings.ContainsAny(host, " /\t@") {
		return "", fmt.Errorf("want HOST:PORT with a host name or IP address, e.g. \"10.0.0.2:%d\"", NetworkBurninPort)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("port %q: want 1 to 65535", port)
	}
	return net.JoinHostPort(host, port), nil
}

// positiveSeconds reads a number of seconds > 0, as a JSON number or a
// string (driver_info values are often strings).
func positiveSeconds(args map[string]any, name string, def float64) (time.Duration, error) {
	f := def
	switch x := args[name].(type) {
	case nil:
	case float64:
		f = x
	case int:
		f = float64(x)
	case string:
		v, err := strconv.ParseFloat(strings.TrimSpace(x), 64)
		if err != nil {
			return 0, fmt.Errorf("%s=%q: want a number of seconds", name, x)
		}
		f = v
	default:
		return 0, fmt.Errorf("%s: want a number of seconds, got %T", name, x)
	}
	if !(f > 0) || math.IsInf(f, 0) || f > 1e7 {
		return 0, fmt.Errorf("%s=%v: want a number of seconds above 0 (and below 10000000)", name, args[name])
	}
	return time.Duration(f * float64(time.Second)), nil
}

// NetworkBurninPair reads the pair's key the coordinator adds to the
// step (ArgBurninNetworkPair): this node's and the partner's UUIDs and
// the key.
func NetworkBurninPair(args map[string]any) (node, partner string, key []byte, err error) {
	pair, _ := args[ArgBurninNetworkPair].(map[string]any)
	node, _ = pair["node"].(string)
	partner, _ = pair["partner_node"].(string)
	secret, _ := pair["secret"].(string)
	key, kerr := hex.DecodeString(secret)
	if node == "" || partner == "" || kerr != nil || len(key) < 16 {
		return "", "", nil, errors.New("burnin_network: the step lacks the pair key the coordinator adds to it; run it through a coordinator that pairs nodes")
	}
	return node, partner, key, nil
}
