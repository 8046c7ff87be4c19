package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/bmedge/bmedge/coordinator/store"
)

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
}

// inmemCluster starts n members on raft's in-memory transport, each with
// its store on disk in its own folder, all with the same db.key.
type inmemCluster struct {
	t       *testing.T
	members []*Member
	trans   []*raft.InmemTransport
	dirs    []string
	peers   []Peer
}

func newInmemCluster(t *testing.T, n int, tweak func(*Config)) *inmemCluster {
	t.Helper()
	c := &inmemCluster{t: t}
	key := make([]byte, store.KeySize)
	for i := range key {
		key[i] = byte(i * 7)
	}
	for i := 0; i < n; i++ {
		addr, tr := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("m%d", i)))
		c.trans = append(c.trans, tr)
		c.peers = append(c.peers, Peer{Name: fmt.Sprintf("m%d", i), Addr: string(addr)})
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "db.key"), key, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("the cluster's secret, 32 bytes or more"), 0o600); err != nil {
			t.Fatal(err)
		}
		c.dirs = append(c.dirs, dir)
	}
	for i := range c.trans {
		for j := range c.trans {
			if i != j {
				c.trans[i].Connect(c.trans[j].LocalAddr(), c.trans[j])
			}
		}
	}
	for i := 0; i < n; i++ {
		c.members = append(c.members, c.open(i, tweak))
	}
	t.Cleanup(func() {
		for _, m := range c.members {
			if m != nil {
				m.Close()
			}
		}
	})
	return c
}

func (c *inmemCluster) open(i int, tweak func(*Config)) *Member {
	cfg := Config{Name: c.peers[i].Name, Listen: c.peers[i].Addr, Peers: c.peers, DataDir: c.dirs[i], Log: quietLog(),
		// Short enough for quick elections, long enough that a loaded
		// machine (load 20) does not depose a leader mid-test.
		HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond, LeaderLease: 250 * time.Millisecond,
		transport: c.trans[i]}
	if tweak != nil {
		tweak(&cfg)
	}
	m, err := Open(cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	return m
}

// leader waits up to 5 s for one member to lead.
func (c *inmemCluster) leader() *Member {
	c.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range c.members {
			if m != nil && m.IsLeader() {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("no leader within 5 s")
	return nil
}

func commitKeys(t *testing.T, m *Member, from, to int) {
	t.Helper()
	cm := m.Committer(m.Store())
	for i := from; i < to; i++ {
		var b store.Batch
		b.Set(fmt.Sprintf("n/node-%04d", i), []byte(fmt.Sprintf("record %d", i)))
		if i%3 == 0 && i > 0 {
			b.Delete(fmt.Sprintf("n/node-%04d", i-1))
		}
		if err := cm.Commit(context.Background(), &b); err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
	}
}

// wantKeys checks that m's store holds exactly the keys the commits of
// 0..n made, waiting up to 5 s for it to apply them.
func wantKeys(t *testing.T, m *Member, n int) {
	t.Helper()
	want := map[string]string{}
	for i := 0; i < n; i++ {
		want[fmt.Sprintf("n/node-%04d", i)] = fmt.Sprintf("record %d", i)
		if i%3 == 0 && i > 0 {
			delete(want, fmt.Sprintf("n/node-%04d", i-1))
		}
	}
	var got map[string]string
	deadline := time.Now().Add(5 * time.Second)
	for {
		got = map[string]string{}
		if err := m.Store().Scan("n/", func(k string, v []byte) error { got[k] = string(v); return nil }); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("member %s holds %d keys, want %d (first difference: got %v)", m.Name(), len(got), len(want), firstDiff(got, want))
}

func firstDiff(got, want map[string]string) string {
	for k, v := range want {
		if got[k] != v {
			return fmt.Sprintf("%s=%q, want %q", k, got[k], v)
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			return fmt.Sprintf("%s=%q not wanted", k, v)
		}
	}
	return "none"
}

// Every batch committed on the leader is in every member's store, in
// order (a later delete removes an earlier set), and Commit returns once
// the leader's own store has it.
func TestReplicatedCommits(t *testing.T) {
	c := newInmemCluster(t, 3, nil)
	l := c.leader()
	commitKeys(t, l, 0, 1)
	if _, found, _ := l.Store().Get("n/node-0000"); !found {
		t.Fatal("Commit returned before the leader's store held the batch")
	}
	commitKeys(t, l, 1, 200)
	for _, m := range c.members {
		wantKeys(t, m, 200)
	}
	// A follower's committer refuses: only the leader commits.
	for _, m := range c.members {
		if m == l {
			continue
		}
		var b store.Batch
		b.Set("n/x", []byte("x"))
		if err := m.Committer(m.Store()).Commit(context.Background(), &b); !errors.Is(err, store.ErrNotLeading) {
			t.Fatalf("a commit on follower %s: %v, want store.ErrNotLeading", m.Name(), err)
		}
	}
}

// A member cut off while the log moved on and was compacted catches up
// from a snapshot (the store's backup stream) plus the log, and a
// restarted member comes back with the same store.
func TestSnapshotCatchUp(t *testing.T) {
	c := newInmemCluster(t, 3, func(cfg *Config) { cfg.SnapshotThreshold, cfg.TrailingLogs = 16, 8 })
	l := c.leader()
	commitKeys(t, l, 0, 20)
	var lag int
	for i, m := range c.members {
		if m != l {
			lag = i
			break
		}
	}
	wantKeys(t, c.members[lag], 20)
	// Cut it off, move the log on, snapshot and compact it.
	for i := range c.trans {
		if i != lag {
			c.trans[i].Disconnect(c.trans[lag].LocalAddr())
			c.trans[lag].Disconnect(c.trans[i].LocalAddr())
		}
	}
	c.members[lag].Close()
	c.members[lag] = nil
	l = c.leader()
	commitKeys(t, l, 20, 120)
	if err := l.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	commitKeys(t, l, 120, 130)
	if first, _ := l.logs.FirstIndex(); first <= 25 {
		t.Fatalf("the leader's log starts at %d: not compacted, the test would not need a snapshot", first)
	}
	// The snapshot file is encrypted: no record in the clear.
	snaps, err := l.snaps.List()
	if err != nil || len(snaps) == 0 {
		t.Fatalf("no snapshot: %v", err)
	}
	_, rc, err := l.snaps.Open(snaps[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, 1<<20)
	n, _ := rc.Read(data)
	rc.Close()
	if containsRecord(data[:n]) {
		t.Fatal("the snapshot holds a record in the clear")
	}
	// Back: it gets the snapshot and the log after it.
	_, tr := raft.NewInmemTransport(raft.ServerAddress(c.peers[lag].Addr))
	c.trans[lag] = tr
	for i := range c.trans {
		if i != lag {
			c.trans[i].Connect(tr.LocalAddr(), tr)
			tr.Connect(c.trans[i].LocalAddr(), c.trans[i])
		}
	}
	c.members[lag] = c.open(lag, func(cfg *Config) { cfg.SnapshotThreshold, cfg.TrailingLogs = 16, 8 })
	for _, m := range c.members {
		wantKeys(t, m, 130)
	}
}

func containsRecord(b []byte) bool {
	for i := 0; i+6 <= len(b); i++ {
		if string(b[i:i+6]) == "record" {
			return true
		}
	}
	return false
}

// A leader cut off from both followers keeps nothing: its commit fails,
// it stops leading within its lease, the other two elect a leader that
// takes writes, and once the partition heals the old leader follows
// with the same store as the others, without the write it could not
// commit.
func TestPartitionedLeaderKeepsNothing(t *testing.T) {
	c := newInmemCluster(t, 3, nil)
	old := c.leader()
	commitKeys(t, old, 0, 10)
	oi := -1
	for i, m := range c.members {
		if m == old {
			oi = i
		}
	}
	cut := func(connect bool) {
		for i := range c.trans {
			if i == oi {
				continue
			}
			if connect {
				c.trans[i].Connect(c.trans[oi].LocalAddr(), c.trans[oi])
				c.trans[oi].Connect(c.trans[i].LocalAddr(), c.trans[i])
			} else {
				c.trans[i].Disconnect(c.trans[oi].LocalAddr())
				c.trans[oi].Disconnect(c.trans[i].LocalAddr())
			}
		}
	}
	if err := old.VerifyLeader(); err != nil {
		t.Fatalf("the leader cannot confirm it leads before the cut: %v", err)
	}
	cut(false)
	// A heartbeat sent before the cut may still be answered and count
	// for the first check; within a few leases no check may succeed.
	verified := time.Now().Add(3 * time.Second)
	for old.VerifyLeader() == nil {
		if time.Now().After(verified) {
			t.Fatal("a leader cut off from its majority still confirmed it leads 3 s after the cut (it would answer stale reads)")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var b store.Batch
	b.Set("n/lost", []byte("written on a cut-off leader"))
	if err := old.Committer(old.Store()).Commit(context.Background(), &b); err == nil {
		t.Fatal("a leader cut off from its majority committed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for old.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the cut-off leader still leads 5 s on")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var nl *Member
	for nl == nil && time.Now().Before(deadline.Add(3*time.Second)) {
		for _, m := range c.members {
			if m != old && m.IsLeader() {
				nl = m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if nl == nil {
		t.Fatal("the other two elected no leader")
	}
	commitKeys(t, nl, 10, 30)
	cut(true)
	for _, m := range c.members {
		wantKeys(t, m, 30)
		if _, found, _ := m.Store().Get("n/lost"); found {
			t.Fatalf("member %s holds the write the cut-off leader could not commit", m.Name())
		}
	}
	if old.IsLeader() {
		t.Log("note: the old leader was elected again after the heal")
	}
}
