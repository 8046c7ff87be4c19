package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// client talks to the coordinator's API.
type client struct {
	ctx  context.Context
	base string
	http *http.Client
	// user and password are sent as HTTP Basic credentials when user is
	// set (a coordinator with --auth http_basic).
	user, password string
	// cacert is the --os-cacert file, for messages.
	cacert string
}

// credentials are what the client authenticates and verifies with: the
// same flags and variables as the baremetal CLI.
type credentials struct {
	user, password string
	cacert         string
}

// apiError is an error answer of the API.
type apiError struct {
	Status int
	Msg    string
}

func (e *apiError) Error() string { return e.Msg }

func (c *client) do(method, path string, body any, out any) (int, http.Header, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.ctx, method, c.base+path, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("bad coordinator URL %q: %w", c.base, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	if c.user != "" {
		req.SetBasicAuth(c.user, c.password)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, c.transportError(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 400 {
		msg := errorText(b, resp.Status)
		switch {
		case resp.StatusCode == http.StatusUnauthorized && c.user == "":
			msg = fmt.Sprintf("the coordinator at %s asks for a user name and password (HTTP 401: %s): set OS_USERNAME and OS_PASSWORD, or --os-username and --os-password, to an entry of its --htpasswd file", c.base, msg)
		case resp.StatusCode == http.StatusUnauthorized:
			msg = fmt.Sprintf("the coordinator at %s refused user %q (HTTP 401: %s): check OS_USERNAME and OS_PASSWORD (or --os-username and --os-password) against its --htpasswd file", c.base, c.user, msg)
		case resp.StatusCode == http.StatusBadRequest && strings.Contains(msg, "HTTP request to an HTTPS server"):
			msg = fmt.Sprintf("the coordinator at %s serves https: use --url %s", c.base, strings.Replace(c.base, "http://", "https://", 1))
		}
		return resp.StatusCode, resp.Header, &apiError{Status: resp.StatusCode, Msg: msg}
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp.StatusCode, resp.Header, fmt.Errorf("unexpected answer from the coordinator: %v", err)
		}
	}
	return resp.StatusCode, resp.Header, nil
}

// errorText extracts Ironic's faultstring from an error body.
func errorText(b []byte, status string) string {
	var outer struct {
		ErrorMessage string `json:"error_message"`
	}
	if json.Unmarshal(b, &outer) == nil && outer.ErrorMessage != "" {
		var inner struct {
			Faultstring string `json:"faultstring"`
		}
		if json.Unmarshal([]byte(outer.ErrorMessage), &inner) == nil && inner.Faultstring != "" {
			return inner.Faultstring
		}
		return outer.ErrorMessage
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return status
	}
	return s
}

// transportError explains a request that got no answer: most often the
// coordinator is not running, or its TLS certificate is not trusted.
func (c *client) transportError(err error) error {
	var unknownCA x509.UnknownAuthorityError
	var badHost x509.HostnameError
	var invalid x509.CertificateInvalidError
	host := c.base
	if u, perr := url.Parse(c.base); perr == nil {
		host = u.Hostname()
	}
	switch {
	case errors.As(err, &unknownCA) && c.cacert == "":
		return fmt.Errorf("the coordinator at %s presented a TLS certificate signed by a CA this client does not trust (%v): "+
			"pass that CA's certificate with --os-cacert FILE or OS_CACERT (with 'coordinator certs --dir DIR' it is DIR/ca.pem)", c.base, unknownCA)
	case errors.As(err, &unknownCA):
		return fmt.Errorf("the coordinator at %s presented a TLS certificate that the CA in --os-cacert %s did not sign (%v): "+
			"pass the CA that signed the coordinator's --tls-cert", c.base, c.cacert, unknownCA)
	case errors.As(err, &badHost):
		return fmt.Errorf("the coordinator's TLS certificate is not valid for %s (%v): use a --url host that the certificate names, "+
			"or make a certificate for it ('coordinator certs --host %s')", host, badHost, host)
	case errors.As(err, &invalid):
		return fmt.Errorf("the coordinator at %s presented an unusable TLS certificate: %v", c.base, invalid)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("the coordinator at %s serves plain http, not https: use --url %s", c.base, strings.Replace(c.base, "https://", "http://", 1))
	}
	return fmt.Errorf("cannot reach the coordinator at %s: %v (is 'coordinator serve' running? set --url or COORDINATOR_URL)", c.base, err)
}

// newClient returns a client of the API at base. With cr.cacert, https
// servers are trusted only when that CA signed them (as with curl
// --cacert), not by the system's CAs.
func newClient(ctx context.Context, base string, cr credentials) (*client, error) {
	c := &client{ctx: ctx, base: strings.TrimRight(base, "/"), user: cr.user, password: cr.password, cacert: cr.cacert,
		http: &http.Client{Timeout: 60 * time.Second}}
	if cr.user == "" && cr.password != "" {
		return nil, errors.New("a password is set (OS_PASSWORD or --os-password) without a user name: set OS_USERNAME or --os-username too")
	}
	if cr.cacert != "" {
		pem, err := os.ReadFile(cr.cacert)
		if err != nil {
			return nil, fmt.Errorf("cannot read the CA file of --os-cacert/OS_CACERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--os-cacert/OS_CACERT %s holds no PEM certificate; give the CA's certificate (ca.pem), not a key", cr.cacert)
		}
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		c.http.Transport = t
	}
	return c, nil
}
