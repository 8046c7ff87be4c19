// Package boot holds the early-boot chores of the in-band ramdisk agent:
// reading its parameters from the kernel command line, loading the kernel
// modules the hardware needs, waiting for randomness, bringing the network
// up and powering off or rebooting. The agent's main calls them in order;
// each is an exported function so the later protocol code can reuse them.
//
// Parsing and module matching are pure functions over in-memory data and
// are unit-tested without root; the parts that touch the kernel are thin.
package boot

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
)

// Prefix is the namespace of the agent's kernel parameters (bm.node=...).
// Dotted names stay out of init's environment; the agent reads them from
// /proc/cmdline.
const Prefix = "bm."

// IPMode says how the agent gets its address.
type IPMode string

const (
	// IPDHCP asks every Ethernet interface for a DHCPv4 lease and takes the first.
	IPDHCP IPMode = "dhcp"
	// IPStatic configures Addr (and Gateway, DNS) on one interface.
	IPStatic IPMode = "static"
)

// NetConfig is the network part of the parameters.
type NetConfig struct {
	Mode    IPMode
	Addr    netip.Prefix     // static address with prefix length (bm.ip=10.0.2.15/24)
	Gateway netip.Addr       // bm.gw=, optional
	DNS     []netip.Addr     // bm.dns=a,b, optional
	Iface   string           // bm.iface= interface name, optional
	MAC     net.HardwareAddr // bm.mac= (or BOOTIF=01-aa-bb-..), selects the interface, optional
}

// Params are the agent's kernel parameters.
type Params struct {
	Node     string // bm.node, required: the node's name or UUID
	Broker   string // bm.broker: MQTT broker URL or host:port
	Site     string // bm.site
	User     string // bm.user: MQTT user name
	Password string // bm.password: MQTT password; never logged (see String)
	// CAPin (bm.ca=sha256/...) is the pin of the CA that signs the
	// broker's certificate; an mqtts:// broker is verified against it.
	CAPin string
	Net   NetConfig
	Debug bool // bm.debug: on a fatal error drop to a shell instead of rebooting
	// Mode (bm.mode) is "" for a node's boot, ModeDiscovery for a
	// machine that belongs to no node: it reports its inventory once
	// and powers off.
	Mode string

	// All holds every bm.* parameter by its full name, including ones this
	// version does not know, for later additions (tokens, TLS settings...).
	All map[string]string
}

// ModeDiscovery is bm.mode of a discovery boot.
const ModeDiscovery = "discovery"

// String prints the parameters for the log with the password redacted.
func (p Params) String() string {
	keys := make([]string, 0, len(p.All))
	for k := range p.All {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		v := p.All[k]
		if isSecret(k) {
			v = "<redacted>"
		}
		fmt.Fprintf(&b, "%s=%s", k, v)
	}
	return b.String()
}

func isSecret(key string) bool {
	k := strings.ToLower(key)
	return strings.Contains(k, "password") || strings.Contains(k, "token") || strings.Contains(k, "secret")
}

// ErrNoNode is returned by ParseCmdline when bm.node is missing.
var ErrNoNode = errors.New("bm.node= is missing from the kernel command line")

// ReadCmdline reads and parses /proc/cmdline.
func ReadCmdline() (Params, error) {
	s, err := ReadCmdlineText()
	if err != nil {
		return Params{}, err
	}
	return ParseCmdline(s)
}

// ReadCmdlineText returns /proc/cmdline as text.
func ReadCmdlineText() (string, error) {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return "", fmt.Errorf("read kernel command line: %w", err)
	}
	return string(b), nil
}

// ParseCmdline parses a kernel command line. It understands the kernel's
// quoting (param="value with spaces"); the last occurrence of a parameter
// wins, as for the kernel. Only bm.* parameters and BOOTIF are used.
func ParseCmdline(cmdline string) (Params, error) {
	return parseWords(SplitCmdline(cmdline))
}

// parseWords parses split kernel parameters (ParseCmdline, MergeParams).
func parseWords(words []string) (Params, error) {
	p := Params{All: map[string]string{}, Net: NetConfig{Mode: IPDHCP}}
	bootif := ""
	for _, w := range words {
		key, val, _ := strings.Cut(w, "=")
		if key == "BOOTIF" {
			bootif = val
			continue
		}
		if !strings.HasPrefix(key, Prefix) {
			continue
		}
		p.All[key] = val
	}
	for key, val := range p.All {
		var err error
		switch strings.TrimPrefix(key, Prefix) {
		case "node":
			p.Node = val
		case "broker":
			p.Broker = val
		case "site":
			p.Site = val
		case "user":
			p.User = val
		case "password":
			p.Password = val
		case "ca":
			if !strings.HasPrefix(val, "sha256/") || len(val) != len("sha256/")+43 {
				err = errors.New("want sha256/ followed by 43 base64url characters (as 'coordinator certs' prints)")
			}
			p.CAPin = val
		case "mode":
			if val != ModeDiscovery {
				err = fmt.Errorf("want %s (or no bm.mode)", ModeDiscovery)
			}
			p.Mode = val
		case "debug":
			p.Debug = val == "" || val == "1" || strings.EqualFold(val, "true") || strings.EqualFold(val, "yes")
		case "ip":
			err = p.Net.parseIP(val)
		case "gw":
			p.Net.Gateway, err = netip.ParseAddr(val)
		case "dns":
			for _, s := range strings.Split(val, ",") {
				if s = strings.TrimSpace(s); s == "" {
					continue
				}
				a, e := netip.ParseAddr(s)
				if e != nil {
					err = e
					break
				}
				p.Net.DNS = append(p.Net.DNS, a)
			}
		case "iface":
			p.Net.Iface = val
		case "mac":
			p.Net.MAC, err = net.ParseMAC(val)
		}
		if err != nil {
			return p, fmt.Errorf("kernel parameter %s=%q: %w", key, val, err)
		}
	}
	if p.Net.MAC == nil && bootif != "" {
		// PXELINUX/iPXE style: BOOTIF=01-aa-bb-cc-dd-ee-ff (01 = Ethernet).
		s := bootif
		if len(s) == 20 && strings.HasPrefix(s, "01-") {
			s = s[3:]
		}
		mac, err := net.ParseMAC(strings.ReplaceAll(s, "-", ":"))
		if err != nil {
			return p, fmt.Errorf("kernel parameter BOOTIF=%q: %w", bootif, err)
		}
		p.Net.MAC = mac
	}
	if p.Node == "" {
		return p, ErrNoNode
	}
	if p.CAPin != "" && !strings.HasPrefix(p.Broker, "mqtts://") {
		return p, fmt.Errorf("kernel parameter bm.ca is set but bm.broker=%q is not an mqtts:// URL", p.Broker)
	}
	if p.Net.Mode == IPStatic && p.Net.Gateway.IsValid() && p.Net.Gateway.Is4() != p.Net.Addr.Addr().Is4() {
		return p, fmt.Errorf("kernel parameter bm.gw=%s: not the address family of bm.ip=%s", p.Net.Gateway, p.Net.Addr)
	}
	return p, nil
}

func (n *NetConfig) parseIP(val string) error {
	if val == "" || strings.EqualFold(val, "dhcp") {
		n.Mode = IPDHCP
		return nil
	}
	pfx, err := netip.ParsePrefix(val)
	if err != nil {
		return fmt.Errorf(`want "dhcp" or ADDRESS/PREFIXLEN: %w`, err)
	}
	a := pfx.Addr()
	if a.IsUnspecified() || a.IsMulticast() || a.IsLoopback() {
		return fmt.Errorf("%s is not a host address", a)
	}
	if a.Is4() && pfx.Bits() < 32 && a == pfx.Masked().Addr() {
		return fmt.Errorf("%s is the network address of %s", a, pfx.Masked())
	}
	n.Mode = IPStatic
	n.Addr = pfx
	return nil
}

// SplitCmdline splits a kernel command line into parameters the way the
// kernel's next_arg does: on white space, with double quotes grouping
// (quotes are removed: a="b c" and "a=b c" both give `a=b c`).
func SplitCmdline(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
			have = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}
