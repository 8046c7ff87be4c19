package console

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/drivers/ipmi"
	"github.com/bmedge/bmedge/drivers/ipmi/sol"
	"github.com/bmedge/bmedge/drivers/redfish/serialssh"
)

// SOLDialer opens an ipmi node's console by IPMI Serial-over-LAN, with
// the driver's own ipmi_address, ipmi_port, ipmi_username,
// ipmi_password and ipmi_cipher_suite.
type SOLDialer struct{}

func (SOLDialer) Dial(ctx context.Context, n Target) (io.ReadWriteCloser, error) {
	ep, err := ipmi.EndpointOf(n.DriverInfo)
	if err != nil {
		return nil, err
	}
	return sol.Dial(ctx, ep.Addr, ep.Username, ep.Password, sol.WithCipherSuite(ep.CipherSuite))
}

// SSHDialer opens a Redfish node's console through the BMC's SSH serial
// console (iDRAC's `console com2`, iLO's `vsp`): the host of
// redfish_address, port redfish_console_port (22), the node's redfish
// credentials, and the BMC's SSH host key, which must be given
// (redfish_console_host_key, one line as ssh-keyscan prints it, without
// the host name): an SSH console is never opened to a key nobody checked.
// redfish_console_vendor says which console command: idrac (the default)
// or ilo.
type SSHDialer struct{}

func (SSHDialer) Dial(ctx context.Context, n Target) (io.ReadWriteCloser, error) {
	addr, key, vendor, err := sshConsoleOf(n)
	if err != nil {
		return nil, err
	}
	return serialssh.Dial(ctx, addr, n.Username, n.Password, ssh.FixedHostKey(key), serialssh.WithVendor(vendor))
}

func sshConsoleOf(n Target) (addr string, key ssh.PublicKey, vendor serialssh.Vendor, err error) {
	u, perr := url.Parse(n.Address)
	if perr != nil || u.Hostname() == "" {
		return "", nil, vendor, fmt.Errorf("redfish_address %q has no host for the SSH serial console", n.Address)
	}
	port := 22
	if v, ok := n.DriverInfo["redfish_console_port"]; ok {
		p, perr := strconv.Atoi(strings.TrimSpace(fmt.Sprint(v)))
		if perr != nil || p < 1 || p > 65535 {
			return "", nil, vendor, fmt.Errorf("redfish_console_port %v: give the BMC's SSH port, 1 to 65535 (default 22)", v)
		}
		port = p
	}
	line, _ := n.DriverInfo["redfish_console_host_key"].(string)
	if strings.TrimSpace(line) == "" {
		return "", nil, vendor, fmt.Errorf("redfish_console_host_key is not set: give the BMC's SSH host key (ssh-keyscan -p %d %s prints it; set its \"TYPE KEY\" part), so that the console is never opened to an unchecked host", port, u.Hostname())
	}
	key, _, _, _, perr = ssh.ParseAuthorizedKey([]byte(line))
	if perr != nil {
		return "", nil, vendor, fmt.Errorf("redfish_console_host_key: not an SSH public key (%v); give it as ssh-keyscan prints it, \"TYPE KEY\"", perr)
	}
	switch v, _ := n.DriverInfo["redfish_console_vendor"].(string); v {
	case "", "idrac":
		vendor = serialssh.IDRAC
	case "ilo":
		vendor = serialssh.ILO
	default:
		return "", nil, vendor, fmt.Errorf("redfish_console_vendor %q: idrac (console com2, the default) or ilo (vsp)", v)
	}
	return net.JoinHostPort(u.Hostname(), strconv.Itoa(port)), key, vendor, nil
}
