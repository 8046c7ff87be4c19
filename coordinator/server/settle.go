package server

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/bmedge/bmedge/lib/netbudget"
)

// An API connection counts as pending (against the listener's pending
// budgets, where a source that holds fewer may take its place) until it
// carries a request that passed authentication: not merely until its
// first request header, since a stranger can send one (GET /, or a wrong
// password) and hold the connection open for its keep-alive. Only a
// request with credentials (or any request under --auth none, which is
// loopback only) whose answer is not 401, 403 or 429 settles it, when
// its status is written (a long event stream of the web view does not
// hold a pending place).

type connKey struct{}

// connContext keeps the connection in its requests' context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// settleAuthenticated wraps h: the connection of a request that passed
// authentication is settled (netbudget) when its status is written.
func settleAuthenticated(h http.Handler, open bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(net.Conn)
		if c == nil || (!open && r.Header.Get("Authorization") == "") {
			h.ServeHTTP(w, r)
			return
		}
		sw := &settleWriter{ResponseWriter: w, c: c}
		h.ServeHTTP(sw, r)
		sw.decide(http.StatusOK) // nothing written: net/http answers 200
	})
}

type settleWriter struct {
	http.ResponseWriter
	c    net.Conn
	done bool
}

func (w *settleWriter) decide(status int) {
	if w.done {
		return
	}
	w.done = true
	if status != http.StatusUnauthorized && status != http.StatusForbidden && status != http.StatusTooManyRequests {
		netbudget.Settle(w.c)
		netbudget.Known(w.c)
	}
}

func (w *settleWriter) WriteHeader(status int) {
	w.decide(status)
	w.ResponseWriter.WriteHeader(status)
}

func (w *settleWriter) Write(b []byte) (int, error) {
	w.decide(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

// Flush and Unwrap keep streaming (the web view's events) working
// through the wrapper.
func (w *settleWriter) Flush() {
	w.decide(http.StatusOK)
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *settleWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands the connection to a WebSocket (the node console): it was
// authenticated, so it settles first.
func (w *settleWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.decide(http.StatusSwitchingProtocols)
	h, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("the connection cannot be taken over")
	}
	return h.Hijack()
}
