package sim

import (
	"errors"
	"fmt"
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
	if l := s.rescues[node]; l != nil {
		if l.hash == hash {
			return l.srv, nil
		}
		l.srv.Close()
		delete(s.rescues, node)
	}
	srv, err := rescuessh.Start(rescuessh.Config{Hash: hash, Listen: net.JoinHostPort(RescueHost, "0"), Shell: shell,
		Version: "SSH-2.0-bmedge-rescue-simulated", Log: s.log.With("node", node)})
	if err != nil {
		return nil, fmt.Errorf("rescue login: %w", err)
	}
	s.rescues[node] = &rescueLogin{srv: srv, hash: hash, boot: boot}
	s.log.Info("simulated rescue login listening", "node", node, "addr", srv.Addr().String(), "host_key", ssh.FingerprintSHA256(srv.HostKey()))
	return srv, nil
}

// stopRescueLocked closes node's rescue login, if any; s.mu is held.
func (s *Sim) stopRescueLocked(node string) {
	if l := s.rescues[node]; l != nil {
		l.srv.Close()
		delete(s.rescues, node)
	}
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
