package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/bmedge/bmedge/coordinator/certs"
)

// certs makes a lab CA and a server certificate, so that trying TLS
// takes one command.
func (c *cmd) certs(args []string) int {
	fs := c.flags("certs", "certs --dir DIR [--host NAME_OR_IP]... [--force]\n\n"+
		"Makes a lab CA (ca.pem, ca-key.pem) and a server certificate signed by it (server.pem, server-key.pem;\n"+
		"keys are mode 0600, ECDSA P-256) in DIR, and prints the CA's pin. Serve with\n"+
		"  coordinator serve --tls-cert DIR/server.pem --tls-key DIR/server-key.pem\n"+
		"and give clients DIR/ca.pem (--os-cacert, OS_CACERT, curl --cacert).")
	dir := fs.String("dir", "", "folder to write the four files into (required; made if missing)")
	var hosts list
	fs.Var(&hosts, "host", "a DNS name or IP address the server certificate is valid for (repeatable; default localhost, 127.0.0.1, ::1, 10.0.2.2)")
	force := fs.Bool("force", false, "replace certificate files that are already in DIR (clients that trust the old CA will not trust the new one)")
	pos, err := parse(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) > 0 || *dir == "" {
		return c.fail("usage: coordinator certs --dir DIR [--host NAME_OR_IP]... [--force]")
	}
	if len(hosts) == 0 {
		hosts = certs.DefaultHosts
	}
	// The CA's name tells two lab CAs apart in a browser's or openssl's
	// output.
	host, _ := os.Hostname()
	ca, err := certs.MakeCA(fmt.Sprintf("bmedge lab CA %s %s", host, time.Now().UTC().Format("2006-01-02T15:04:05Z")))
	if err != nil {
		return c.fail("making the CA: %v", err)
	}
	srv, err := certs.MakeServerCert(ca, hosts)
	if err != nil {
		return c.fail("--host: %v", err)
	}
	if err := certs.WriteFiles(*dir, ca, srv, *force); err != nil {
		if errors.Is(err, certs.ErrExist) {
			return c.fail("%v in %s; nothing was written. Use the ones there, another --dir, or --force to replace them (clients that trust the old CA then need the new ca.pem)", err, *dir)
		}
		return c.fail("writing the certificates: %v", err)
	}
	files := certs.Files(*dir)
	fmt.Fprintf(c.out, "wrote %s, %s (CA) and %s, %s (server, valid for %v until %s)\n",
		files[0], files[1], files[2], files[3], []string(hosts), srv.Cert.NotAfter.Format("2006-01-02"))
	fmt.Fprintf(c.out, "ca pin: %s%s\n", certs.PinPrefix, certs.Pin(ca.Cert))
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	fmt.Fprintf(c.out, "serve:   coordinator serve --tls-cert %s --tls-key %s ...\n", abs(files[2]), abs(files[3]))
	fmt.Fprintf(c.out, "clients: OS_CACERT=%s (or --os-cacert, curl --cacert)\n", abs(files[0]))
	return 0
}
