package loadrig

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bmedge/bmedge/coordinator/certs"
)

// StartCluster runs n coordinators as one cluster on 127.0.0.1 (their
// own data folders sharing db.key and secret, member certificates from
// one CA, as docs/cluster.md prepares them) with StartProcess's flags,
// waits until one leads and every member's API answers, and returns the
// leader as the Coord: the load program talks to it, as a client does
// that a follower has sent to the leader. Stop ends every member; CPU
// sums them.
func StartCluster(ctx context.Context, bin, tmp string, s Settings, n int) (*Coord, error) {
	if n < 1 {
		return nil, fmt.Errorf("a cluster of %d members", n)
	}
	pki := filepath.Join(tmp, "pki")
	ca, err := certs.MakeCA("bench cluster CA")
	if err != nil {
		return nil, err
	}
	srv, err := certs.MakeServerCert(ca, []string{"127.0.0.1"})
	if err != nil {
		return nil, err
	}
	if err := certs.WriteFiles(pki, ca, srv, false); err != nil {
		return nil, err
	}
	key, secret := make([]byte, 32), make([]byte, 24)
	_, _ = rand.Read(key)
	_, _ = rand.Read(secret)
	type member struct{ name, dir, api, mqtt, link string }
	var ms []member
	var peers []string
	for i := range n {
		m := member{name: fmt.Sprintf("c%d", i+1), dir: filepath.Join(tmp, fmt.Sprintf("c%d", i+1))}
		for _, a := range []*string{&m.api, &m.mqtt, &m.link} {
			if *a, err = FreeAddr(); err != nil {
				return nil, err
			}
		}
		data := filepath.Join(m.dir, "data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(data, "db.key"), key, 0o600); err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(data, "secret"), []byte(fmt.Sprintf("%x", secret)), 0o600); err != nil {
			return nil, err
		}
		mc, err := certs.MakeMemberCert(ca, m.name, nil)
		if err != nil {
			return nil, err
		}
		if err := certs.WriteMember(pki, m.name, ca, mc, false); err != nil {
			return nil, err
		}
		ms = append(ms, m)
		peers = append(peers, m.name+"="+m.link)
	}
	byName := map[string]*Coord{}
	var all []*Coord
	stopAll := func() {
		for _, c := range all {
			c.Stop()
		}
	}
	for _, m := range ms {
		logf := filepath.Join(m.dir, "coordinator.log")
		lf, err := os.Create(logf)
		if err != nil {
			stopAll()
			return nil, err
		}
		cert, ckey := certs.MemberFiles(pki, m.name)
		args := append(serveArgs(filepath.Join(m.dir, "data"), m.api, m.mqtt, s),
			"--cluster-member", m.name, "--cluster-listen", m.link, "--cluster-peers", strings.Join(peers, ","),
			"--cluster-cert", cert, "--cluster-cert-key", ckey, "--cluster-ca", filepath.Join(pki, certs.CAFile))
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = lf, lf
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			lf.Close()
			stopAll()
			return nil, fmt.Errorf("start member %s: %w", m.name, err)
		}
		c := &Coord{APIURL: "http://" + m.api, PID: cmd.Process.Pid, LogFile: logf, DataDir: filepath.Join(m.dir, "data"), cmd: cmd, exited: make(chan struct{})}
		go func() { _ = cmd.Wait(); lf.Close(); close(c.exited) }()
		byName[m.name] = c
		all = append(all, c)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		leader := clusterLeader(all)
		if l := byName[leader]; l != nil && l.answers() {
			for _, c := range all {
				if c != l {
					l.members = append(l.members, c)
				}
			}
			return l, nil
		}
		for _, c := range all {
			if !c.Alive() {
				stopAll()
				return nil, fmt.Errorf("a cluster member exited at start:\n%s", Tail(c.LogFile, 20))
			}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			stopAll()
			return nil, fmt.Errorf("no cluster leader served within 60s (%v):\n%s", ctx.Err(), Tail(all[0].LogFile, 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// clusterLeader is the leader's name as the first member that knows says.
func clusterLeader(all []*Coord) string {
	for _, c := range all {
		resp, err := http.Get(c.APIURL + "/v1/cluster")
		if err != nil {
			continue
		}
		var st struct {
			Leader string `json:"leader"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err == nil && resp.StatusCode == 200 && st.Leader != "" {
			return st.Leader
		}
	}
	return ""
}

// answers tells whether the coordinator's engine serves the API.
func (c *Coord) answers() bool {
	resp, err := http.Get(c.APIURL + "/v1/nodes?limit=1")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// CPU is the CPU time of the coordinator's process, and of the other
// members of its cluster.
func (c *Coord) CPU() time.Duration {
	d := ProcCPU(c.PID)
	for _, m := range c.members {
		d += ProcCPU(m.PID)
	}
	return d
}
