package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bmedge/bmedge/coordinator/certs"
	"github.com/spf13/cobra"
)

const certsLong = `Makes a lab CA (ca.pem, ca-key.pem) and a server certificate signed by it (server.pem,
server-key.pem) in DIR, ECDSA P-256, keys mode 0600, so that trying TLS takes one
command. The server certificate is valid for the --host names and addresses. It prints
the CA's pin, ` + "`ca pin: sha256/<base64url of the SHA-256 of the CA's SubjectPublicKeyInfo>`" + `,
by which a client that carries no CA file recognises it. It refuses to overwrite files
already in DIR unless --force (clients that trust the old CA then need the new ca.pem).
The same pair serves the API over https and the embedded broker over mqtts:
` + "`coordinator serve --tls-cert DIR/server.pem --tls-key DIR/server-key.pem`" + `; clients get
DIR/ca.pem (--os-cacert, OS_CACERT, curl --cacert).`

// certsCmd makes a lab CA and a server certificate, so that trying TLS
// takes one command.
func (c *cmd) certsCmd() *cobra.Command {
	var dir string
	var hosts list
	var force bool
	var member string
	cc := &cobra.Command{
		Use:     "certs --dir DIR",
		Short:   "Make a lab CA and server certificate for TLS",
		Long:    certsLong,
		Example: "  coordinator certs --dir build/certs\n  coordinator certs --dir /etc/bmedge/pki --host coord.example.net --host 192.0.2.10",
		Args:    args(),
		RunE: func(*cobra.Command, []string) error {
			if dir == "" {
				return usagef("certs needs --dir DIR, the folder to write the four files into")
			}
			if member != "" {
				return c.memberCert(dir, member, hosts, force)
			}
			return c.certs(dir, hosts, force)
		},
	}
	fs := cc.Flags()
	fs.StringVar(&dir, "dir", "", "`DIR` to write the four files into (required; made if missing)")
	fs.Var(&hosts, "host", "`NAME_OR_IP`, a DNS name or IP address the server certificate is valid for (repeatable; default "+
		strings.Join(certs.DefaultHosts, ", ")+", the last being the host as a QEMU guest sees it)")
	fs.BoolVar(&force, "force", false, "replace certificate files that are already in DIR (clients that trust the old CA will not trust the new one)")
	fs.StringVar(&member, "member", "", "make the certificate of cluster member `NAME` (member-NAME.pem, member-NAME-key.pem) with the CA in DIR, made first if DIR holds none "+
		"(serve --cluster-cert, --cluster-cert-key; --cluster-ca is DIR/ca.pem)")
	_ = cc.MarkFlagDirname("dir")
	_ = cc.RegisterFlagCompletionFunc("host", cobra.NoFileCompletions)
	return cc
}

func (c *cmd) certs(dir string, hosts list, force bool) error {
	if len(hosts) == 0 {
		hosts = certs.DefaultHosts
	}
	// The CA's name tells two lab CAs apart in a browser's or openssl's
	// output.
	host, _ := os.Hostname()
	ca, err := certs.MakeCA(fmt.Sprintf("bmedge lab CA %s %s", host, time.Now().UTC().Format("2006-01-02T15:04:05Z")))
	if err != nil {
		return fmt.Errorf("making the CA: %v", err)
	}
	srv, err := certs.MakeServerCert(ca, hosts)
	if err != nil {
		return fmt.Errorf("--host: %v", err)
	}
	if err := certs.WriteFiles(dir, ca, srv, force); err != nil {
		if errors.Is(err, certs.ErrExist) {
			return fmt.Errorf("%v in %s; nothing was written. Use the ones there, another --dir, or --force to replace them (clients that trust the old CA then need the new ca.pem)", err, dir)
		}
		return fmt.Errorf("writing the certificates: %v", err)
	}
	files := certs.Files(dir)
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
	return nil
}

// memberCert makes a cluster member's certificate with the CA in dir
// (making the CA and a server certificate first when dir has none).
func (c *cmd) memberCert(dir, name string, hosts list, force bool) error {
	ca, err := certs.ReadCA(dir)
	if errors.Is(err, os.ErrNotExist) {
		if err := c.certs(dir, hosts, false); err != nil {
			return err
		}
		ca, err = certs.ReadCA(dir)
	}
	if err != nil {
		return fmt.Errorf("reading the CA in %s: %v", dir, err)
	}
	m, err := certs.MakeMemberCert(ca, name, hosts)
	if err != nil {
		return fmt.Errorf("making the member certificate: %v", err)
	}
	if err := certs.WriteMember(dir, name, ca, m, force); err != nil {
		if errors.Is(err, certs.ErrExist) {
			return fmt.Errorf("%v; nothing was written. Use it, or --force to replace it", err)
		}
		return err
	}
	cp, kp := certs.MemberFiles(dir, name)
	fmt.Fprintf(c.out, "wrote %s, %s (cluster member %s, until %s)\n", cp, kp, name, m.Cert.NotAfter.Format("2006-01-02"))
	return nil
}
