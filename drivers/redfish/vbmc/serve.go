package vbmc

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"
)

// ServeOptions say where and how a BMC listens.
type ServeOptions struct {
	// Addr is the listen address (default 127.0.0.1:0, a free port).
	Addr string
	// CertFile and KeyFile, when both set, make the BMC speak HTTPS only.
	CertFile, KeyFile string
}

// Server is a BMC on its own listener.
type Server struct {
	// URL is the BMC's address for driver_info redfish_address.
	URL string
	srv *http.Server
	ln  net.Listener
}

// Serve starts h (a BMC) on a listener of its own.
func Serve(h http.Handler, opts ServeOptions) (*Server, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	if (opts.CertFile == "") != (opts.KeyFile == "") {
		return nil, errors.New("vbmc: TLS needs both a certificate and a key file")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("vbmc: listen on %s: %w", addr, err)
	}
	scheme := "http"
	if opts.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(opts.CertFile, opts.KeyFile)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("vbmc: load TLS certificate %s and key %s: %w", opts.CertFile, opts.KeyFile, err)
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	s := &Server{
		URL: scheme + "://" + ln.Addr().String(),
		// Handshake errors from clients that refuse our certificate are
		// expected in tests; they go to a discarding log.
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(discard{}, "", 0)},
		ln:  ln,
	}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the listener and every connection.
func (s *Server) Close() error {
	return s.srv.Close()
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
