// Package certs makes a lab certificate authority and server certificates
// for the coordinator's API and broker, and computes the pin by which a
// client that carries no CA file (the ramdisk) recognises a CA. It is for
// trying TLS in one command; a site with its own PKI uses its own
// certificates with the same flags.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bmedge/bmedge/lib/mqttlink"
)

// File names that WriteFiles writes in its folder.
const (
	CAFile        = "ca.pem"
	CAKeyFile     = "ca-key.pem"
	ServerFile    = "server.pem"
	ServerKeyFile = "server-key.pem"
)

// PinPrefix is written before a pin where its hash must be named, as in
// "sha256/<pin>".
const PinPrefix = mqttlink.PinPrefix

// DefaultHosts are the server certificate's names when none are given:
// the coordinator's own machine, and 10.0.2.2, which is how QEMU's user
// network shows the host to a guest.
var DefaultHosts = []string{"localhost", "127.0.0.1", "::1", "10.0.2.2"}

// Validity of what MakeCA and MakeServerCert make.
const (
	CAValidity     = 10 * 365 * 24 * time.Hour
	ServerValidity = 825 * 24 * time.Hour
)

// Pair is a certificate with its private key.
type Pair struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// CertPEM returns the certificate in PEM.
func (p *Pair) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Cert.Raw})
}

// KeyPEM returns the private key in PEM (PKCS #8).
func (p *Pair) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(p.Key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// MakeCA makes a self-signed CA (ECDSA P-256) that may sign server
// certificates only (path length 0), named commonName.
func MakeCA(commonName string) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: commonName, Organization: []string{"bmedge lab"}},
		// An hour back, for clocks that differ a little.
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Pair{Cert: cert, Key: key}, nil
}

// MakeServerCert makes a server certificate (ECDSA P-256) signed by ca,
// valid for hosts: IP addresses and DNS names (DefaultHosts if none).
func MakeServerCert(ca *Pair, hosts []string) (*Pair, error) {
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: hosts[0], Organization: []string{"bmedge lab"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServerValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := addHosts(tmpl, hosts); err != nil {
		return nil, err
	}
	return sign(ca, tmpl, key)
}

// Pin is base64url (no padding) of the SHA-256 of the certificate's
// SubjectPublicKeyInfo: the form of HPKP and of curl's --pinnedpubkey.
// It names the key, not the certificate, so a CA re-issued with the same
// key keeps its pin. It is mqttlink.Pin without PinPrefix: the ramdisk
// checks the broker with mqttlink's.
func Pin(cert *x509.Certificate) string {
	return strings.TrimPrefix(mqttlink.Pin(cert), PinPrefix)
}

// ReadCertFile reads the first certificate of a PEM file.
func ReadCertFile(path string) (*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%s holds no PEM certificate", path)
		}
		if blk.Type == "CERTIFICATE" {
			return x509.ParseCertificate(blk.Bytes)
		}
	}
}

// Files returns the paths WriteFiles writes in dir, in the order CA,
// CA key, server certificate, server key.
func Files(dir string) []string {
	return []string{filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile),
		filepath.Join(dir, ServerFile), filepath.Join(dir, ServerKeyFile)}
}

// ErrExist is returned (wrapped) by WriteFiles when a file is already
// there and force is false.
var ErrExist = errors.New("certificate files already exist")

// WriteFiles writes ca.pem, ca-key.pem, server.pem and server-key.pem into
// dir (made if missing). Keys are mode 0600, certificates 0644. Unless
// force, it refuses when any of them exists, writing nothing: replacing a
// CA silently would lock out every client that trusts the old one.
func WriteFiles(dir string, ca, server *Pair, force bool) error {
	caKey, err := ca.KeyPEM()
	if err != nil {
		return err
	}
	srvKey, err := server.KeyPEM()
	if err != nil {
		return err
	}
	paths := Files(dir)
	if !force {
		for _, p := range paths {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s: %w", p, ErrExist)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	// The server file holds the CA after the certificate: a TLS server
	// sends the whole file, and a ramdisk that knows the CA only by pin
	// needs to see it.
	contents := [][]byte{ca.CertPEM(), caKey, append(server.CertPEM(), ca.CertPEM()...), srvKey}
	modes := []os.FileMode{0o644, 0o600, 0o644, 0o600}
	for i, p := range paths {
		if err := writeFile(p, contents[i], modes[i]); err != nil {
			return err
		}
	}
	return nil
}

// writeFile writes through a new temporary file renamed into place, so
// the mode is the one asked for even when a file was there (os.WriteFile
// keeps an old file's mode, which could leave a new key readable), and
// a half-written key never replaces a whole one.
func writeFile(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, there is nothing to remove
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// MemberOU is the organizational unit that marks a cluster member's
// certificate (the cluster link accepts no other).
const MemberOU = "bmedge cluster member"

// MemberFiles are the certificate and key files of member name in dir.
func MemberFiles(dir, name string) (cert, key string) {
	return filepath.Join(dir, "member-"+name+".pem"), filepath.Join(dir, "member-"+name+"-key.pem")
}

// MakeMemberCert makes the certificate of cluster member name (ECDSA
// P-256) signed by ca: common name the member's name, organizational
// unit MemberOU, for both ends of a TLS connection (members dial each
// other), valid for hosts (none: members are known by certificate, not
// by address).
func MakeMemberCert(ca *Pair, name string, hosts []string) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"bmedge lab"}, OrganizationalUnit: []string{MemberOU}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(ServerValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if err := addHosts(tmpl, hosts); err != nil {
		return nil, err
	}
	return sign(ca, tmpl, key)
}

// ReadCA reads the CA and its key that WriteFiles wrote into dir.
func ReadCA(dir string) (*Pair, error) {
	cert, err := ReadCertFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, err
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("%s holds no PEM key", filepath.Join(dir, CAKeyFile))
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s is not an ECDSA key", filepath.Join(dir, CAKeyFile))
	}
	return &Pair{Cert: cert, Key: ek}, nil
}

// WriteMember writes member name's certificate (then the CA) and key
// into dir, refusing to replace them unless force.
func WriteMember(dir, name string, ca, member *Pair, force bool) error {
	certPath, keyPath := MemberFiles(dir, name)
	if !force {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s: %w", p, ErrExist)
			}
		}
	}
	k, err := member.KeyPEM()
	if err != nil {
		return err
	}
	if err := writeFile(certPath, append(member.CertPEM(), ca.CertPEM()...), 0o644); err != nil {
		return err
	}
	return writeFile(keyPath, k, 0o600)
}

// sign bounds tmpl's validity by the CA's and signs it with ca for key.
func sign(ca *Pair, tmpl *x509.Certificate, key *ecdsa.PrivateKey) (*Pair, error) {
	if ca.Cert.NotAfter.Before(tmpl.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Pair{Cert: cert, Key: key}, nil
}

// addHosts adds hosts to tmpl: IP addresses and DNS names; an empty name
// or one that is neither is refused.
func addHosts(tmpl *x509.Certificate, hosts []string) error {
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch {
		case h == "":
			return errors.New("an empty host name cannot be in a certificate")
		case net.ParseIP(h) != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(h))
		case strings.ContainsAny(h, " /:@"):
			return fmt.Errorf("%q is neither an IP address nor a DNS name", h)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return nil
}
