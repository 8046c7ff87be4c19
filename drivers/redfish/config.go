package redfish

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"
)

// driver_info keys, as Ironic's redfish hardware type names them.
const (
	InfoAddress  = "redfish_address"
	InfoSystemID = "redfish_system_id"
	InfoUsername = "redfish_username"
	InfoPassword = "redfish_password"
	InfoVerifyCA = "redfish_verify_ca"
	InfoAuthType = "redfish_auth_type"
)

// Auth types (redfish_auth_type).
const (
	AuthBasic   = "basic"
	AuthSession = "session"
	AuthAuto    = "auto"
)

const systemsPrefix = "/redfish/v1/Systems/"

// config is validated driver_info. The password is kept out of every
// error and log line: nothing here formats it.
type config struct {
	endpoint string // scheme://host[:port], no trailing slash
	systemID string // "" or a path under /redfish/v1/Systems/
	username string
	password string
	verify   bool
	caFile   string
	caPEM    string // the CA file's contents, to tell a changed file
	roots    *x509.CertPool
	authType string
}

func infoString(info map[string]any, key string) (string, error) {
	v, ok := info[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("redfish driver_info %s must be a string, not %T", key, v)
	}
	return strings.TrimSpace(s), nil
}

// redactAddress is an address as errors may show it: without userinfo
// (everything up to its last @: a password may hold a / that ends the
// authority early), query or fragment. It works on the text, so that an
// address url.Parse refuses is redacted too.
func redactAddress(addr string) string {
	if i := strings.IndexAny(addr, "?#"); i >= 0 {
		addr = addr[:i]
	}
	scheme, rest, ok := strings.Cut(addr, "://")
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	if ok {
		return scheme + "://" + rest
	}
	return rest
}

// parseInfo validates driver_info. Errors name the key and say what a
// good value looks like.
func parseInfo(info map[string]any) (*config, error) {
	c := &config{verify: true, authType: AuthAuto}
	addr, err := infoString(info, InfoAddress)
	if err != nil {
		return nil, err
	}
	if addr == "" {
		return nil, fmt.Errorf("redfish driver_info %s is required: the BMC's URL, e.g. https://10.0.0.5", InfoAddress)
	}
	// Ironic accepts a bare host and assumes https; so do we.
	if !strings.Contains(addr, "://") {
		addr = "https://" + addr
	}
	// The address may carry a password (ftp://admin:PW@host, or one
	// url.Parse refuses): an error, which becomes the node's last_error,
	// names only its redacted form.
	shown := redactAddress(addr)
	u, err := url.Parse(addr)
	if err != nil {
		// Not err's text: it quotes the whole address, or a part of it.
		return nil, fmt.Errorf("redfish driver_info %s %q is not a URL, e.g. https://10.0.0.5", InfoAddress, shown)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("redfish driver_info %s %q must be an http or https URL, e.g. https://10.0.0.5", InfoAddress, shown)
	}
	if u.Host == "" || u.Hostname() == "" {
		return nil, fmt.Errorf("redfish driver_info %s %q has no host", InfoAddress, shown)
	}
	if u.User != nil {
		return nil, fmt.Errorf("redfish driver_info %s must not carry credentials; use %s and %s", InfoAddress, InfoUsername, InfoPassword)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("redfish driver_info %s %q must be the BMC's scheme and host only (the driver finds /redfish/v1 itself)", InfoAddress, shown)
	}
	c.endpoint = u.Scheme + "://" + u.Host

	if c.systemID, err = infoString(info, InfoSystemID); err != nil {
		return nil, err
	}
	if c.systemID != "" {
		// Ironic's redfish_system_id is the system's path; a bare Id is
		// accepted too.
		if !strings.HasPrefix(c.systemID, "/") {
			c.systemID = systemsPrefix + c.systemID
		}
		c.systemID = strings.TrimSuffix(c.systemID, "/")
		if !strings.HasPrefix(c.systemID, systemsPrefix) || strings.ContainsAny(c.systemID[len(systemsPrefix):], "/?# ") || len(c.systemID) == len(systemsPrefix) {
			return nil, fmt.Errorf("redfish driver_info %s %q must be a system's path, e.g. /redfish/v1/Systems/1, or its Id", InfoSystemID, c.systemID)
		}
	}

	if c.username, err = infoString(info, InfoUsername); err != nil {
		return nil, err
	}
	if v, ok := info[InfoPassword]; ok && v != nil {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("redfish driver_info %s must be a string", InfoPassword)
		}
		c.password = s
	}
	if c.password != "" && c.username == "" {
		return nil, fmt.Errorf("redfish driver_info has %s but no %s", InfoPassword, InfoUsername)
	}

	switch v := info[InfoVerifyCA].(type) {
	case nil:
	case bool:
		c.verify = v
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "", "true", "yes", "1", "on":
		case "false", "no", "0", "off":
			c.verify = false
		default:
			c.caFile = strings.TrimSpace(v)
			pem, err := os.ReadFile(c.caFile)
			if err != nil {
				return nil, fmt.Errorf("redfish driver_info %s is neither true, false nor a readable CA file: %v", InfoVerifyCA, err)
			}
			c.caPEM = string(pem)
			c.roots = x509.NewCertPool()
			if !c.roots.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("redfish driver_info %s: %s holds no PEM certificate", InfoVerifyCA, c.caFile)
			}
		}
	default:
		return nil, fmt.Errorf("redfish driver_info %s must be true, false or the path of a CA file, not %T", InfoVerifyCA, v)
	}
	if c.caFile != "" && u.Scheme != "https" {
		return nil, fmt.Errorf("redfish driver_info %s names a CA file but %s is plain http", InfoVerifyCA, InfoAddress)
	}

	at, err := infoString(info, InfoAuthType)
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(at) {
	case "":
	case AuthBasic, AuthSession, AuthAuto:
		c.authType = strings.ToLower(at)
	default:
		return nil, fmt.Errorf("redfish driver_info %s %q must be basic, session or auto", InfoAuthType, at)
	}
	return c, nil
}

// same reports whether two configurations describe the same BMC access.
func (c *config) same(o *config) bool {
	return c.endpoint == o.endpoint && c.systemID == o.systemID && c.username == o.username &&
		c.password == o.password && c.verify == o.verify && c.caFile == o.caFile && c.caPEM == o.caPEM &&
		c.authType == o.authType
}
