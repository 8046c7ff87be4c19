package sim

import (
	"errors"
	"fmt"
	"maps"
	"net"

	"golang.org/x/crypto/ssh"

	"github.com/bmedge/bmedge/lib/rescuessh"
)

// RescueHost is the loopback address a simulated node's rescue login
// listens on, each node on a port of its own that the system picks.
const RescueHost = "127.0.0.1"

// rescueLogin is a simulated node's rescue login: the real ramdisk's SSH
// server (lib/rescuessh, same user, hash check and budgets) whose
// sessions run a small built-in command set (rescueShell) instead of a
// shell.
type rescueLogin struct {
	srv  *rescuessh.Server
	hash string
	boot uint64
	// prior are the refusals of the logins of this boot it replaced.
	prior map[string]int64
}

// refused is what this boot's logins refused, by kind.
func (l *rescueLogin) refused() map[string]int64 {
	out := maps.Clone(l.prior)
	if out == nil {
		out = map[string]int64{}
	}
	for k, n := range l.srv.Stats() {
		out[k] += n
	}
	return out
}

// finalizeRescue is a simulated ramdisk's finalize_rescue, with the real
// ramdisk's rules (ramdisk/steps finalizeRescue): it takes only the
// SHA-crypt hash of the rescue password, marked hashed, and starts the
// login for it. A resent finalize_rescue with the same hash keeps the
// running login; another hash replaces it. The result's summary (the
// node's history) says where to log in, as a real ramdisk's does.
func (r *simRunner) finalizeRescue(args map[string]any) (map[string]any, error) {
	hash, _ := args["rescue_password"].(string)
	if hashed, _ := args["hashed"].(bool); !hashed || hash == "" {
		return nil, errors.New("finalize_rescue needs the SHA-crypt hash of the rescue password with hashed=true; this ramdisk takes no clear password")
	}
	srv, err := r.s.startRescue(r.node, r.boot, hash, func() rescuessh.Session { return r.rescueShell() })
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(srv.Addr().String())
	fp := ssh.FingerprintSHA256(srv.HostKey())
	return map[string]any{
		"summary": fmt.Sprintf("rescue login (simulated): ssh -p %s %s@%s (host key %s); a few built-in commands, type help",
			port, rescuessh.User, RescueHost, fp),
		"ssh_host_key_fingerprint": fp,
	}, nil
}

// startRescue starts node's rescue login for hash, or keeps the running
// one with the same hash, unless the ramdisk of that boot is gone (the
// node was powered off or rebooted meanwhile).
func (s *Sim) startRescue(node string, boot uint64, hash string, shell func() rescuessh.Session) (*rescuessh.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.boots[node] != boot {
		return nil, errors.New("the node's ramdisk stopped (powered off or rebooted) before the rescue login started; rescue the node again")
	}
	var prior map[string]int64
	if l := s.rescues[node]; l != nil {
		if l.hash == hash {
			return l.srv, nil
		}
		prior = l.refused()
		s.stopRescueLocked(node)
	}
	srv, err := rescuessh.Start(rescuessh.Config{Hash: hash, Listen: net.JoinHostPort(RescueHost, "0"), Shell: shell,
		Version: "SSH-2.0-bmedge-rescue-simulated", Log: s.log.With("node", node)})
	if err != nil {
		return nil, fmt.Errorf("rescue login: %w", err)
	}
	s.rescues[node] = &rescueLogin{srv: srv, hash: hash, boot: boot, prior: prior}
	s.log.Info("simulated rescue login listening", "node", node, "addr", srv.Addr().String(), "host_key", ssh.FingerprintSHA256(srv.HostKey()))
	return srv, nil
}

// stopRescueLocked closes node's rescue login, if any; s.mu is held.
// What it refused stays counted in RescueRefused.
func (s *Sim) stopRescueLocked(node string) {
	if l := s.rescues[node]; l != nil {
		l.srv.Close()
		for k, n := range l.srv.Stats() {
			s.rescueClosed[k] += n
		}
		delete(s.rescues, node)
	}
}

// RescueRefused counts what the simulated rescue logins refused since
// the simulator started, by kind (lib/rescuessh's), the closed ones'
// included: the edge agent's /metrics.
func (s *Sim) RescueRefused() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := maps.Clone(s.rescueClosed)
	for _, l := range s.rescues {
		for k, n := range l.srv.Stats() {
			out[k] += n
		}
	}
	return out
}

// rescueRefusedOf is what node's rescue logins of boot refused, for its
// heartbeats (as a real ramdisk's carry them); nil while none runs.
func (s *Sim) rescueRefusedOf(node string, boot uint64) map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.rescues[node]; l != nil && l.boot == boot {
		return l.refused()
	}
	return nil
}

// RescueAddr is the address of node's rescue login, "" when none runs.
func (s *Sim) RescueAddr(node string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.rescues[node]; l != nil {
		return l.srv.Addr().String()
	}
	return ""
}

// rescueShell is a session of node's simulated rescue login.
func (r *simRunner) rescueShell() *rescueShell {
	inv, _ := r.inventory()["inventory"].(map[string]any)
	return &rescueShell{host: r.node, site: r.s.cfg.Site, inventory: inv, clock: r.s.cfg.Clock, started: r.s.cfg.Clock.Now()}
}
