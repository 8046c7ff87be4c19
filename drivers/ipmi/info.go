package ipmi

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"unicode"

	"github.com/bougou/go-ipmi/pkg/types"
)

// Defaults of Ironic's ipmi hardware type.
const (
	DefaultPort        = 623
	DefaultCipherSuite = 3
	DefaultPrivLevel   = "ADMINISTRATOR"
)

// IPMI 2.0 limits (RMCP+ RAKP): a user name has at most 16 bytes, a
// password at most 20.
const (
	maxUsername = 16
	maxPassword = 20
)

// InfoError says which driver_info key is wrong and why. It never quotes
// the value of ipmi_password.
type InfoError struct {
	Key    string
	Reason string
}

func (e *InfoError) Error() string { return "driver_info " + e.Key + ": " + e.Reason }

// config is a node's parsed driver_info.
type config struct {
	host      string // as given (an IPv6 literal without brackets)
	port      int
	username  string
	password  string
	cipher    types.CipherSuiteID
	priv      types.PrivilegeLevel
	privName  string
	noTimeout bool // ipmi_disable_boot_timeout
}

// addr is host:port for messages.
func (c config) addr() string { return net.JoinHostPort(c.host, strconv.Itoa(c.port)) }

// String and GoString keep the password out of any %v or %#v of a config.
func (c config) String() string {
	return fmt.Sprintf("ipmi %s user %q cipher suite %d priv %s", c.addr(), c.username, c.cipher, c.privName)
}

func (c config) GoString() string { return c.String() }

// privLevels are the values Ironic accepts for ipmi_priv_level.
var privLevels = map[string]types.PrivilegeLevel{
	"CALLBACK":      types.PrivilegeLevelCallback,
	"USER":          types.PrivilegeLevelUser,
	"OPERATOR":      types.PrivilegeLevelOperator,
	"ADMINISTRATOR": types.PrivilegeLevelAdministrator,
}

// parseInfo reads driver_info as Ironic's ipmi hardware type does. Values
// come from JSON, so numbers may arrive as float64, json.Number or strings.
// Keys it does not know are other interfaces' business and are ignored.
func parseInfo(info map[string]any) (config, error) {
	c := config{port: DefaultPort, cipher: DefaultCipherSuite, priv: types.PrivilegeLevelAdministrator, privName: DefaultPrivLevel, noTimeout: true}

	host, err := str(info, "ipmi_address", false)
	if err != nil {
		return c, err
	}
	host = strings.TrimSpace(host)
	if host == "" {
		return c, &InfoError{"ipmi_address", "missing; set it to the BMC's IP address or host name"}
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if strings.IndexFunc(host, unicode.IsSpace) >= 0 || strings.ContainsAny(host, "/[]") {
		return c, &InfoError{"ipmi_address", fmt.Sprintf("%q is not an IP address or host name", host)}
	}
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return c, &InfoError{"ipmi_address", fmt.Sprintf("%q is not an IP address or host name (give the port in ipmi_port, not in the address)", host)}
	}
	c.host = host

	if p, ok, err := integer(info, "ipmi_port"); err != nil {
		return c, err
	} else if ok {
		if p < 1 || p > 65535 {
			return c, &InfoError{"ipmi_port", fmt.Sprintf("%d is not a UDP port; give a number from 1 to 65535 (default %d)", p, DefaultPort)}
		}
		c.port = int(p)
	}

	if c.username, err = str(info, "ipmi_username", false); err != nil {
		return c, err
	}
	if len(c.username) > maxUsername {
		return c, &InfoError{"ipmi_username", fmt.Sprintf("%q is %d bytes long; IPMI allows at most %d", c.username, len(c.username), maxUsername)}
	}
	if c.password, err = str(info, "ipmi_password", true); err != nil {
		return c, err
	}
	if len(c.password) > maxPassword {
		return c, &InfoError{"ipmi_password", fmt.Sprintf("is %d bytes long; IPMI 2.0 allows at most %d", len(c.password), maxPassword)}
	}

	if cs, ok, err := integer(info, "ipmi_cipher_suite"); err != nil {
		return c, err
	} else if ok {
		if cs == 0 {
			return c, &InfoError{"ipmi_cipher_suite", "0 means no authentication at all and is refused; use 17 or 3 and disable suite 0 on the BMC"}
		}
		if cs < 0 || cs > 255 || !knownSuite(types.CipherSuiteID(cs)) {
			return c, &InfoError{"ipmi_cipher_suite", fmt.Sprintf("%d is not an IPMI cipher suite this driver knows; use 17 or 3 (default %d)", cs, DefaultCipherSuite)}
		}
		c.cipher = types.CipherSuiteID(cs)
	}

	if pl, err := str(info, "ipmi_priv_level", false); err != nil {
		return c, err
	} else if pl != "" {
		lvl, ok := privLevels[strings.ToUpper(strings.TrimSpace(pl))]
		if !ok {
			return c, &InfoError{"ipmi_priv_level", fmt.Sprintf("%q is not a privilege level; use ADMINISTRATOR (default), OPERATOR, USER or CALLBACK", pl)}
		}
		c.priv, c.privName = lvl, strings.ToUpper(strings.TrimSpace(pl))
	}

	if v, ok := info["ipmi_disable_boot_timeout"]; ok && v != nil {
		b, err := boolean(v)
		if err != nil {
			return c, &InfoError{"ipmi_disable_boot_timeout", err.Error()}
		}
		c.noTimeout = b
	}
	return c, nil
}

func knownSuite(id types.CipherSuiteID) bool {
	_, _, _, ok := types.GetCipherSuiteAlgorithms(id)
	return ok
}

// str reads an optional string. secret keeps the value out of the error.
func str(info map[string]any, key string, secret bool) (string, error) {
	v, ok := info[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		what := fmt.Sprintf("%v (%T)", v, v)
		if secret {
			what = fmt.Sprintf("a %T", v)
		}
		return "", &InfoError{key, fmt.Sprintf("must be a string, not %s", what)}
	}
	return s, nil
}

// integer reads an optional whole number given as a JSON number or a
// string of digits.
func integer(info map[string]any, key string) (int64, bool, error) {
	v, ok := info[key]
	if !ok || v == nil {
		return 0, false, nil
	}
	bad := func() (int64, bool, error) {
		return 0, false, &InfoError{key, fmt.Sprintf("%#v is not a whole number", v)}
	}
	switch n := v.(type) {
	case float64:
		if n != math.Trunc(n) || math.IsInf(n, 0) || math.Abs(n) > 1<<31 {
			return bad()
		}
		return int64(n), true, nil
	case int:
		return int64(n), true, nil
	case int64:
		return n, true, nil
	case json.Number:
		i, err := n.Int64()
		if err != nil {
			return bad()
		}
		return i, true, nil
	case string:
		s := strings.TrimSpace(n)
		if s == "" {
			return 0, false, nil
		}
		i, err := strconv.ParseInt(s, 10, 32)
		if err != nil {
			return bad()
		}
		return i, true, nil
	}
	return bad()
}

// boolean accepts JSON booleans and the strings Ironic's
// strutils.bool_from_string knows.
func boolean(v any) (bool, error) {
	switch b := v.(type) {
	case bool:
		return b, nil
	case string:
		switch strings.ToLower(strings.TrimSpace(b)) {
		case "1", "t", "true", "on", "y", "yes":
			return true, nil
		case "0", "f", "false", "off", "n", "no":
			return false, nil
		}
	}
	return false, fmt.Errorf("%#v is not a boolean; use true or false", v)
}

// Endpoint is what a client of the BMC other than this driver (the
// node's serial console, drivers/ipmi/sol) needs from driver_info: the
// BMC's address, credentials and cipher suite, checked as the driver
// checks them.
type Endpoint struct {
	Addr, Username, Password string
	CipherSuite              int
}

// String keeps the password out of any %v of an Endpoint.
func (e Endpoint) String() string {
	return fmt.Sprintf("ipmi %s as %q (cipher suite %d)", e.Addr, e.Username, e.CipherSuite)
}

// EndpointOf reads driver_info's ipmi_address, ipmi_port,
// ipmi_username, ipmi_password and ipmi_cipher_suite.
func EndpointOf(info map[string]any) (Endpoint, error) {
	c, err := parseInfo(info)
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{Addr: c.addr(), Username: c.username, Password: c.password, CipherSuite: int(c.cipher)}, nil
}
