package mqttbroker

import (
	"log/slog"
	"net"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
)

// serveListener hands accepted connections to mochi, in place of its
// listeners.Net, so that the broker can stop accepting before mochi's
// Server.Close. mochi's attachClient adds each connection to
// Listeners.ClientsWg and Close waits on it: a connection accepted while
// Close runs would Add to a WaitGroup already in Wait (a data race, and
// a connection Close never waits for). Here every connection's goroutine
// holds one count of ClientsWg of its own from before it starts until
// establish returns, taken under mu while the listener is open, and
// stop closes the listener and waits for the accept loop to end before
// Close is called: every Add happens before Wait, at a count above zero.
// (listeners.Net also shares one err variable between its goroutines.)
type serveListener struct {
	id  string
	ln  net.Listener
	srv *mqtt.Server
	log *slog.Logger

	mu               sync.Mutex
	stopped, started bool
	done             chan struct{} // closed when a started Serve's loop has ended
}

func newServeListener(id string, ln net.Listener, srv *mqtt.Server) *serveListener {
	return &serveListener{id: id, ln: ln, srv: srv, log: slog.Default(), done: make(chan struct{})}
}

var _ listeners.Listener = (*serveListener)(nil)

func (l *serveListener) ID() string       { return l.id }
func (l *serveListener) Address() string  { return l.ln.Addr().String() }
func (l *serveListener) Protocol() string { return l.ln.Addr().Network() }

func (l *serveListener) Init(log *slog.Logger) error {
	if log != nil {
		l.log = log
	}
	return nil
}

func (l *serveListener) Serve(establish listeners.EstablishFn) {
	l.mu.Lock()
	if l.stopped || l.started {
		l.mu.Unlock()
		return
	}
	l.started = true
	l.mu.Unlock()
	defer close(l.done)
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.stopped {
			l.mu.Unlock()
			c.Close()
			return
		}
		l.srv.Listeners.ClientsWg.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.srv.Listeners.ClientsWg.Done()
			if err := establish(l.id, c); err != nil {
				l.log.Warn("", "error", err)
			}
		}()
	}
}

// stop closes the listener and, when wait, waits until no connection
// can be handed to mochi any more.
func (l *serveListener) stop(wait bool) {
	l.mu.Lock()
	l.stopped = true
	started := l.started
	l.mu.Unlock()
	_ = l.ln.Close()
	if wait && started {
		<-l.done
	}
}

// Close is called by mochi's Server.Close (after stop): it closes the
// listener's clients.
func (l *serveListener) Close(closeClients listeners.CloseFn) {
	l.stop(false)
	closeClients(l.id)
}
