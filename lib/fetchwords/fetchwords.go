// Package fetchwords says what went wrong with a fetch made on an
// operator's behalf (an image, a config drive, a firmware image) in the
// words the edge agent's site cache, the ramdisk and the simulated
// ramdisk share: the host and what went wrong, never the server's status
// line, its body or a digest of what it sent, which would make every
// such fetch an oracle on the servers the fetcher can reach
// (docs/security.md, "What the edge agent fetches"). It only words
// errors and statuses: no I/O.
package fetchwords

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strings"
	"syscall"
	"unicode/utf8"
)

// Cause is a fetch's transport error in words: no answer in time, a name
// that does not resolve, a connection refused or reset, a TLS handshake
// that failed. The error's own text (which names the addresses dialled)
// is not repeated.
func Cause(err error) string {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return "no answer in time"
	case errors.Is(err, context.Canceled):
		return "the fetch was stopped"
	case errors.As(err, &dns):
		return "the name " + dns.Name + " does not resolve"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "the connection was refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "the connection was reset"
	case isTLS(err):
		return "the TLS handshake failed (is the certificate valid for this name, and signed by a CA this host trusts?)"
	case errors.As(err, &op):
		return "the connection failed (" + op.Op + ")"
	}
	return "the transfer failed"
}

func isTLS(err error) bool {
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	var ua x509.UnknownAuthorityError
	var he x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.As(err, &cv) || errors.As(err, &rh) || errors.As(err, &ua) || errors.As(err, &he) || errors.As(err, &ci)
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// Status is an HTTP status other than the one wanted, in words of its
// class (what an operator needs to fix a URL), never the line the
// server sent: "not found", "access refused", "a server error", "the
// request was refused", "a redirect that was not followed", "an answer
// that is not the file".
func Status(code int) string {
	switch {
	case code == 404 || code == 410:
		return "not found"
	case code == 401 || code == 403 || code == 407:
		return "access refused"
	case code >= 500:
		return "a server error"
	case code >= 400:
		return "the request was refused"
	case code >= 300:
		return "a redirect that was not followed"
	}
	return "an answer that is not the file"
}

// CachePrefix begins the one line of text in the body of the site
// cache's error answers (agent/imagecache, agent/sitecache).
const CachePrefix = "site image cache: "

// MaxReasonBytes bounds the body a fetcher reads for CacheReason: the
// site cache's reason line is at most this long.
const MaxReasonBytes = 1024

// CacheReason is the site cache's reason in the body of its error
// answer (the first line, starting with CachePrefix, valid UTF-8), or ""
// for any other body: another server's body is never repeated.
func CacheReason(body []byte) string {
	line, _, _ := strings.Cut(string(body[:min(len(body), MaxReasonBytes)]), "\n")
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, CachePrefix) || !utf8.ValidString(line) {
		return ""
	}
	return line
}

// Answer words an answer other than 200 OK to the fetch of what ("image",
// "config drive") from src, whose status is code and whose body begins
// with body: the site cache's reason when the site cache answered, else
// the origin's host and the status in words. The caller adds what to do.
func Answer(code int, body []byte, what, src string) string {
	if why := CacheReason(body); why != "" {
		return "cannot download " + what + " " + src + ": " + why
	}
	return "the origin " + Host(src) + " of " + what + " " + src + " did not answer with the " + what + " (not 200 OK: " + Status(code) + ")"
}

// Host is the host (and port) of u for a message, or "(unparsable URL)".
func Host(u string) string {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" {
		return "(unparsable URL)"
	}
	return p.Host
}
