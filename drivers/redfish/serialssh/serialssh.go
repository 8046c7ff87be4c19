// Package serialssh is the client side of a BMC's SSH serial console, the
// Redfish hardware type's way to a node's serial port: iDRAC's
// "console com2" and iLO's "vsp" (Virtual Serial Port) over the BMC's SSH
// management CLI, with the BMC's own username and password.
//
// Dial logs in, asks for a pty (both CLIs expect a terminal), starts the
// login shell (the BMC's CLI prompt) and types the vendor's command; from
// then on reads are the node's serial output and writes are typed at it.
// Close types the vendor's escape (iDRAC Ctrl+\, iLO ESC "(") to leave
// the console, then "exit" to log out, and closes the connection, so the
// BMC frees the console at once rather than after its idle timeout.
//
// The virtual BMC (drivers/redfish/vbmc) accepts both commands at its
// "vbmc-> " prompt with the same escapes. The BMC's SSH port is the
// Manager's SerialConsole.SSH.Port in its Redfish tree (22 on iDRAC and
// iLO).
package serialssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// Vendor is how a BMC's CLI enters and leaves its serial console.
type Vendor struct {
	// Command attaches to the serial console at the CLI's prompt.
	Command string
	// Escape leaves the console back to the prompt.
	Escape string
}

// The vendors' consoles.
var (
	// IDRAC: "console com2", left with Ctrl+\ (the default).
	IDRAC = Vendor{Command: "console com2", Escape: "\x1c"}
	// ILO: "vsp", left with ESC then "(".
	ILO = Vendor{Command: "vsp", Escape: "\x1b("}
)

// Option changes Dial.
type Option func(*options)

type options struct {
	vendor Vendor
}

// WithVendor sets the CLI's console command and escape (default IDRAC).
func WithVendor(v Vendor) Option { return func(o *options) { o.vendor = v } }

// ErrRefused: the BMC refused the login.
var ErrRefused = errors.New("SSH login refused")

// Dial connects to the BMC's SSH CLI at addr (host or host:port, 22 by
// default) as username, checks the BMC's host key with hostKey (required:
// pass ssh.FixedHostKey or a known_hosts callback, never
// ssh.InsecureIgnoreHostKey outside tests) and attaches to the serial
// console. ctx bounds the dial and the login.
func Dial(ctx context.Context, addr, username, password string, hostKey ssh.HostKeyCallback, opts ...Option) (io.ReadWriteCloser, error) {
	o := options{vendor: IDRAC}
	for _, f := range opts {
		f(&o)
	}
	if hostKey == nil {
		return nil, errors.New("SSH serial console: a host key check is required (the BMC's key, e.g. ssh.FixedHostKey or a known_hosts file)")
	}
	if o.vendor.Command == "" || o.vendor.Escape == "" {
		return nil, errors.New("SSH serial console: the vendor's console command and escape are both required")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(strings.Trim(addr, "[]"), "22")
	}
	who := "BMC SSH console " + addr
	cfg := &ssh.ClientConfig{
		User: username,
		Auth: []ssh.AuthMethod{ssh.Password(password), ssh.KeyboardInteractive(func(_, _ string, qs []string, _ []bool) ([]string, error) {
			a := make([]string, len(qs))
			for i := range qs {
				a[i] = password
			}
			return a, nil
		})},
		HostKeyCallback: hostKey,
		Timeout:         30 * time.Second,
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	cc, chans, reqs, err := ssh.NewClientConn(nc, addr, cfg)
	if err != nil {
		stop()
		nc.Close()
		if strings.Contains(err.Error(), "unable to authenticate") {
			return nil, fmt.Errorf("%s refused user %s: wrong username or password (the BMC's own account is needed): %w", who, username, ErrRefused)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", who, ctx.Err())
		}
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	c := ssh.NewClient(cc, chans, reqs)
	fail := func(err error) (io.ReadWriteCloser, error) {
		stop()
		c.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("%s: %w", who, err)
	}
	sess, err := c.NewSession()
	if err != nil {
		return fail(err)
	}
	if err := sess.RequestPty("vt100", 24, 80, ssh.TerminalModes{ssh.ECHO: 0}); err != nil {
		return fail(fmt.Errorf("pty: %w", err))
	}
	in, err := sess.StdinPipe()
	if err != nil {
		return fail(err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		return fail(err)
	}
	if err := sess.Shell(); err != nil {
		return fail(fmt.Errorf("shell: %w", err))
	}
	if _, err := io.WriteString(in, o.vendor.Command+"\r"); err != nil {
		return fail(err)
	}
	stop()
	_ = nc.SetDeadline(time.Time{})
	return &console{c: c, sess: sess, in: in, out: out, vendor: o.vendor}, nil
}

type console struct {
	c      *ssh.Client
	sess   *ssh.Session
	in     io.WriteCloser
	out    io.Reader
	vendor Vendor
	once   sync.Once
}

func (c *console) Read(p []byte) (int, error)  { return c.out.Read(p) }
func (c *console) Write(p []byte) (int, error) { return c.in.Write(p) }

// Close leaves the console with the vendor's escape, logs out and closes
// the connection.
func (c *console) Close() error {
	c.once.Do(func() {
		_, _ = io.WriteString(c.in, c.vendor.Escape)
		_, _ = io.WriteString(c.in, "\rexit\r")
		done := make(chan struct{})
		go func() { _ = c.sess.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		c.sess.Close()
		c.c.Close()
	})
	return nil
}
