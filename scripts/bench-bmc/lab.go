package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/bmedge/bmedge/coordinator/certs"
	"github.com/bmedge/bmedge/drivers/redfish"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// lab is N virtual Redfish BMCs, each with one in-memory system, each on
// its own 127.0.0.1 port, as a rack of servers looks to the edge agent.
type lab struct {
	bmcs     []*vbmc.BMC
	servers  []*vbmc.Server
	machines []*markedMachine
	counters []*counter
	user     string
	password string
	caFile   string
}

// markedMachine is a MemoryMachine that remembers when its power last
// changed: the BMC's side of a power operation's latency.
type markedMachine struct {
	*vbmc.MemoryMachine
	changed atomic.Int64 // UnixNano
}

func (m *markedMachine) Power(ctx context.Context, action vbmc.ResetType) error {
	before := m.PoweredOn()
	err := m.MemoryMachine.Power(ctx, action)
	if err == nil && m.PoweredOn() != before {
		m.changed.Store(time.Now().UnixNano())
	}
	return err
}

// counter counts the Redfish requests a BMC answered.
type counter struct {
	h http.Handler
	n atomic.Int64
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.h.ServeHTTP(w, r)
	c.n.Add(1)
}

func startLab(tmp string, o options) (l *lab, err error) {
	pw := make([]byte, 12)
	if _, err := rand.Read(pw); err != nil {
		return nil, err
	}
	l = &lab{user: "admin", password: hex.EncodeToString(pw)}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	var certFile, keyFile string
	if o.tls {
		ca, err := certs.MakeCA("bench-bmc lab CA")
		if err != nil {
			return nil, err
		}
		srv, err := certs.MakeServerCert(ca, []string{"127.0.0.1"})
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(tmp, "pki")
		if err := certs.WriteFiles(dir, ca, srv, false); err != nil {
			return nil, err
		}
		certFile, keyFile = filepath.Join(dir, certs.ServerFile), filepath.Join(dir, certs.ServerKeyFile)
		l.caFile = filepath.Join(dir, certs.CAFile)
	}
	for i := 0; i < o.nodes; i++ {
		m := &markedMachine{MemoryMachine: vbmc.NewMemoryMachine(vbmc.MemoryOptions{})}
		b, err := vbmc.New(vbmc.Config{Username: l.user, Password: l.password, SessionLimit: o.sessionLimit,
			Name: fmt.Sprintf("bench-bmc %d", i), Systems: []vbmc.SystemConfig{{Machine: m}}})
		if err != nil {
			return nil, err
		}
		l.bmcs = append(l.bmcs, b)
		b.SetFaults(vbmc.Faults{PowerDelay: o.powerDelay, Latency: o.latency})
		c := &counter{h: b}
		s, err := vbmc.Serve(c, vbmc.ServeOptions{Addr: "127.0.0.1:0", CertFile: certFile, KeyFile: keyFile})
		if err != nil {
			return nil, fmt.Errorf("BMC %d: %w", i, err)
		}
		l.servers = append(l.servers, s)
		l.machines = append(l.machines, m)
		l.counters = append(l.counters, c)
	}
	return l, nil
}

// driverInfo is node i's driver_info: BMC i, with its credentials.
func (l *lab) driverInfo(i int) map[string]any {
	info := map[string]any{redfish.InfoAddress: l.servers[i].URL, redfish.InfoUsername: l.user, redfish.InfoPassword: l.password}
	if l.caFile != "" {
		info[redfish.InfoVerifyCA] = l.caFile
	}
	return info
}

// requests is how many Redfish requests all BMCs answered so far.
func (l *lab) requests() int64 {
	var n int64
	for _, c := range l.counters {
		n += c.n.Load()
	}
	return n
}

// powerMarks returns when each machine last changed its power (zero: never).
func (l *lab) powerMarks() []time.Time {
	out := make([]time.Time, len(l.machines))
	for i, m := range l.machines {
		if v := m.changed.Load(); v != 0 {
			out[i] = time.Unix(0, v)
		}
	}
	return out
}

func (l *lab) close() {
	for _, s := range l.servers {
		s.Close()
	}
	for _, b := range l.bmcs {
		b.Close()
	}
}
