package cluster

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bmedge/bmedge/coordinator/certs"
)

// The cluster link: one TCP port per member (--cluster-listen), mutual
// TLS with member certificates of the cluster's CA, then a first byte
// that says what the connection carries: raft's RPCs (linkRaft) or an
// API request forwarded by a follower (linkAPI). A peer without a
// member certificate of the CA is refused at the handshake.
const (
	linkRaft byte = 'R'
	linkAPI  byte = 'H'
)

// MemberOU is the organizational unit of a member certificate
// ('coordinator certs --member NAME'): the API's server certificate,
// signed by the same CA, is not a member's.
const MemberOU = certs.MemberOU

// LoadTLS reads a member's certificate, key and the cluster's CA (PEM
// files) into the link's TLS configuration: each side presents its
// member certificate and accepts only the CA's member certificates.
func LoadTLS(certFile, keyFile, caFile string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("the member certificate --cluster-cert %s --cluster-cert-key %s: %w (make one with 'coordinator certs --dir DIR --member NAME')", certFile, keyFile, err)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("the cluster's CA --cluster-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("the cluster's CA --cluster-ca %s holds no PEM certificate", caFile)
	}
	return MemberTLS(pair, pool), nil
}

// MemberTLS is the link's TLS configuration for a member certificate and
// the CA pool.
func MemberTLS(pair tls.Certificate, pool *x509.CertPool) *tls.Config {
	check := func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("the peer presented no member certificate")
		}
		if !slices.Contains(cs.PeerCertificates[0].Subject.OrganizationalUnit, MemberOU) {
			return fmt.Errorf("the peer's certificate (%s) is not a cluster member's", cs.PeerCertificates[0].Subject.CommonName)
		}
		return nil
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientCAs:    pool,
		RootCAs:      pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		// Members are known by certificate, not by host name: the
		// addresses of --cluster-peers need not be in it.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if err := check(cs); err != nil {
				return err
			}
			opts := x509.VerifyOptions{Roots: pool, Intermediates: x509.NewCertPool(),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		},
	}
}

// link is the member's listener and dialer on the cluster link.
type link struct {
	ln   net.Listener
	tls  *tls.Config
	log  *slog.Logger
	raft *connQueue
	api  *connQueue
	wg   sync.WaitGroup
	// pending bounds the connections in their handshake: a stranger
	// cannot make the member hold more (each lasts at most
	// handshakeTimeout).
	pending chan struct{}
}

// maxPendingHandshakes is how many connections may be in their TLS
// handshake at once; more are closed at accept.
const maxPendingHandshakes = 64

// newLink listens on addr; advertise is the address the other members
// reach this one by (its --cluster-peers entry), which raft tells them
// (a listener on 0.0.0.0 has no address they could use).
func newLink(addr, advertise string, tc *tls.Config, log *slog.Logger) (*link, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster link on %s: %w; check --cluster-listen", addr, err)
	}
	var adv net.Addr = ln.Addr()
	if a, err := net.ResolveTCPAddr("tcp", advertise); err == nil {
		adv = a
	}
	l := &link{ln: ln, tls: tc, log: log, raft: newConnQueue(adv), api: newConnQueue(adv), pending: make(chan struct{}, maxPendingHandshakes)}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

// handshakeTimeout bounds a peer's TLS handshake and first byte.
const handshakeTimeout = 10 * time.Second

func (l *link) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			l.raft.close()
			l.api.close()
			return
		}
		select {
		case l.pending <- struct{}{}:
			go l.sort(c)
		default:
			c.Close()
		}
	}
}

// sort does the handshake and hands the connection to raft or to the
// forwarded API by its first byte.
func (l *link) sort(c net.Conn) {
	defer func() { <-l.pending }()
	tc := tls.Server(c, l.tls)
	_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
	if err := tc.Handshake(); err != nil {
		l.log.Warn("cluster link: refused a peer at the TLS handshake", "peer", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	var b [1]byte
	if _, err := io.ReadFull(tc, b[:]); err != nil {
		tc.Close()
		return
	}
	_ = tc.SetDeadline(time.Time{})
	switch b[0] {
	case linkRaft:
		l.raft.put(tc)
	case linkAPI:
		l.api.put(tc)
	default:
		tc.Close()
	}
}

// dial opens a link connection to addr for kind.
func (l *link) dial(addr string, kind byte, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	c, err := tls.DialWithDialer(d, "tcp", addr, l.tls)
	if err != nil {
		return nil, err
	}
	if _, err := c.Write([]byte{kind}); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (l *link) Close() error {
	err := l.ln.Close()
	l.wg.Wait()
	return err
}

// connQueue is a net.Listener fed by the link's sorting.
type connQueue struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) put(c net.Conn) {
	select {
	case q.ch <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

func (q *connQueue) close()         { q.once.Do(func() { close(q.done) }) }
func (q *connQueue) Close() error   { q.close(); return nil }
func (q *connQueue) Addr() net.Addr { return q.addr }

// raftLayer is raft's StreamLayer on the link.
type raftLayer struct {
	*connQueue
	l *link
}

var _ raft.StreamLayer = raftLayer{}

func (r raftLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return r.l.dial(string(addr), linkRaft, timeout)
}
