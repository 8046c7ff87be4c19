package mqttlink

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// PinPrefix starts every pin: the hash that made it.
const PinPrefix = "sha256/"

// Pin is a certificate's public-key pin: sha256 of its SubjectPublicKeyInfo
// in unpadded base64url, after PinPrefix (50 characters in all, small
// enough for a kernel command line).
func Pin(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return PinPrefix + base64.RawURLEncoding.EncodeToString(sum[:])
}

// PinOfFile returns the pin of the first certificate in a PEM file.
func PinOfFile(path string) (string, error) {
	certs, err := readCerts(path)
	if err != nil {
		return "", err
	}
	return Pin(certs[0]), nil
}

func readCerts(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CA file %s: %w", path, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", path)
	}
	return out, nil
}

// TLSFromCAFile returns a client TLS configuration that trusts only the
// certificates of a PEM file (not the system's roots).
func TLSFromCAFile(path string) (*tls.Config, error) {
	certs, err := readCerts(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// ErrPinMismatch says that no certificate the server sent has the pin.
var ErrPinMismatch = errors.New("no certificate the server sent matches the CA pin")

// TLSFromPin returns a client TLS configuration for a ramdisk that knows
// its broker's CA only by pin (bm.ca on the kernel command line): the
// server must send the pinned certificate in its chain (as a server
// certificate file of leaf plus CA does), and the leaf must chain to it
// and name host, the broker URL's host name or address.
func TLSFromPin(pin, host string) (*tls.Config, error) {
	if !strings.HasPrefix(pin, PinPrefix) {
		return nil, fmt.Errorf("CA pin %q must start with %q", pin, PinPrefix)
	}
	if b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(pin, PinPrefix)); err != nil || len(b) != sha256.Size {
		return nil, fmt.Errorf("CA pin %q is not %s followed by 43 base64url characters", pin, PinPrefix)
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The standard verification needs a root pool; this one checks
		// the chain against the pinned certificate in VerifyConnection.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPinned(cs.PeerCertificates, host, pin)
		},
	}, nil
}

func verifyPinned(chain []*x509.Certificate, host, pin string) error {
	if len(chain) == 0 {
		return errors.New("the server sent no certificate")
	}
	if host == "" {
		return errors.New("no host name to check the broker's certificate against")
	}
	var anchor *x509.Certificate
	inter := x509.NewCertPool()
	for _, c := range chain {
		if Pin(c) == pin {
			anchor = c
		}
		inter.AddCert(c)
	}
	if anchor == nil {
		return fmt.Errorf("%w (the broker's certificate file must hold the server certificate followed by its CA)", ErrPinMismatch)
	}
	roots := x509.NewCertPool()
	roots.AddCert(anchor)
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: host})
	if err != nil {
		return fmt.Errorf("the broker's certificate does not verify against the pinned CA: %w", err)
	}
	return nil
}
