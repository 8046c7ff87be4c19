package fetchwords

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestCause: transport errors in words, without the addresses the error
// names.
func TestCause(t *testing.T) {
	dial := func(err error) error {
		return &url.Error{Op: "Get", URL: "http://10.9.8.7/x", Err: &net.OpError{Op: "dial", Net: "tcp",
			Addr: &net.TCPAddr{IP: net.IPv4(10, 9, 8, 7), Port: 80}, Err: os.NewSyscallError("connect", err)}}
	}
	for _, c := range []struct {
		err  error
		want string
	}{
		{dial(syscall.ECONNREFUSED), "the connection was refused"},
		{dial(syscall.ECONNRESET), "the connection was reset"},
		{dial(syscall.EHOSTUNREACH), "the connection failed (dial)"},
		{&url.Error{Op: "Get", URL: "http://x", Err: &net.DNSError{Err: "no such host", Name: "images.internal", IsNotFound: true}}, "the name images.internal does not resolve"},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), "no answer in time"},
		{&url.Error{Op: "Get", URL: "http://x", Err: &net.DNSError{Err: "i/o timeout", Name: "x", IsTimeout: true}}, "no answer in time"},
		{fmt.Errorf("get: %w", context.Canceled), "the fetch was stopped"},
		{&url.Error{Op: "Get", URL: "https://x", Err: x509.UnknownAuthorityError{}}, "the TLS handshake failed"},
		{errors.New(`malformed HTTP response "secret-internal-bytes"`), "the transfer failed"},
	} {
		got := Cause(c.err)
		if !strings.HasPrefix(got, c.want) || strings.Contains(got, "10.9.8.7") || strings.Contains(got, "secret") {
			t.Errorf("Cause(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// TestAnswer: a status in words of its class; the site cache's reason
// line passed on; any other body never repeated.
func TestAnswer(t *testing.T) {
	for _, c := range []struct {
		code int
		body string
		want string
	}{
		{404, "secret", "the origin 10.0.0.5:8080 of image http://10.0.0.5:8080/a.raw did not answer with the image (not 200 OK: not found)"},
		{410, "", "(not 200 OK: not found)"},
		{401, "secret", "(not 200 OK: access refused)"},
		{403, "", "(not 200 OK: access refused)"},
		{416, "", "(not 200 OK: the request was refused)"},
		{418, "site image cache", "(not 200 OK: the request was refused)"},
		{500, "secret", "(not 200 OK: a server error)"},
		{503, "", "(not 200 OK: a server error)"},
		{304, "", "(not 200 OK: a redirect that was not followed)"},
		{206, "", "(not 200 OK: an answer that is not the file)"},
		{502, "site image cache: no room for image http://x/a.raw\nmore", "cannot download image http://10.0.0.5:8080/a.raw: site image cache: no room for image http://x/a.raw"},
		{502, "  site image cache: stopping  ", "cannot download image http://10.0.0.5:8080/a.raw: site image cache: stopping"},
		{502, "site image cache: \xff", "(not 200 OK: a server error)"},
		{502, "prefix site image cache: secret", "(not 200 OK: a server error)"},
	} {
		got := Answer(c.code, []byte(c.body), "image", "http://10.0.0.5:8080/a.raw")
		if !strings.Contains(got, c.want) || strings.Contains(got, "secret") || strings.Contains(got, "more") || strings.Contains(got, fmt.Sprint(c.code)) {
			t.Errorf("Answer(%d, %q) = %q, want containing %q", c.code, c.body, got, c.want)
		}
	}
	long := CachePrefix + strings.Repeat("x", 2*MaxReasonBytes)
	if got := CacheReason([]byte(long)); len(got) > MaxReasonBytes {
		t.Errorf("a reason of %d bytes is passed on whole", len(got))
	}
}
