package sim

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// bootLogBuffer is a log's output, read while the simulator writes it.
type bootLogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *bootLogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *bootLogBuffer) lines(msg string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, s := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(s, "msg=\""+msg+"\"") {
			out = append(out, s)
		}
	}
	return out
}

// helloWatch is a store that notes whether a hello was published before
// the node's power-on was kept.
type helloWatch struct {
	memStore
	tr              *recorder
	helloBeforeKept bool
}

func (s *helloWatch) PutSim(node string, b []byte, wait bool) {
	if wait && bytes.Contains(b, []byte(`"power":"on"`)) &&
		s.tr.count(func(m *protocol.Message) bool { return m.Kind == protocol.KindHello }) > 0 {
		s.helloBeforeKept = true
	}
	s.memStore.PutSim(node, b, wait)
}

// TestBootLogged: a simulated BMC's power-on from the network logs one
// BootLog line naming the node and the boot its ramdisk says hello
// with, after the power state is kept and before that ramdisk runs; a
// power-on from disk logs none, and a restarted simulator that resumes
// the ramdisk logs no new boot but a ResumeLog line of the same boot
// (scripts/soak counts the distinct boots of these lines).
func TestBootLogged(t *testing.T) {
	out := &bootLogBuffer{}
	tr := &recorder{}
	store := &helloWatch{memStore: memStore{m: map[string][]byte{}}, tr: tr}
	start := func(tr *recorder) (*Sim, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		s := New(Config{Site: "s1", Log: slog.New(slog.NewTextHandler(out, nil)), Opts: Options{Nodes: 2, Heartbeat: 50 * time.Millisecond},
			Transport: tr, Context: func() context.Context { return ctx }})
		if err := s.Restore(store); err != nil {
			t.Fatal(err)
		}
		return s, cancel
	}
	s, kill := start(tr)
	s.OnPower("n2", protocol.PowerOn, protocol.BootDisk)
	s.OnPower("n1", protocol.PowerOn, protocol.BootPXE)
	hello := tr.await(t, "hello", func(m *protocol.Message) bool { return m.Kind == protocol.KindHello })
	l := out.lines(BootLog)
	if len(l) != 1 || !strings.Contains(l[0], "node=n1 ") || !strings.Contains(l[0], "boot="+hello.BootID) {
		t.Fatalf("boot lines %q, want one of n1 with boot %s", l, hello.BootID)
	}
	if store.helloBeforeKept {
		t.Fatal("the ramdisk said hello before the node's power-on was kept")
	}
	kill()
	tr2 := &recorder{}
	_, kill2 := start(tr2)
	defer kill2()
	tr2.await(t, "the resumed ramdisk's hello", func(m *protocol.Message) bool { return m.Kind == protocol.KindHello && m.BootID == hello.BootID })
	if l := out.lines(BootLog); len(l) != 1 {
		t.Fatalf("after the restart %d boot lines, want still 1: %q", len(l), l)
	}
	if l := out.lines(ResumeLog); len(l) != 1 || !strings.Contains(l[0], "node=n1 ") || !strings.Contains(l[0], "boot="+hello.BootID) {
		t.Fatalf("resume lines %q, want one of n1 with boot %s", l, hello.BootID)
	}
}

// TestBootDeviceKept: a boot device set while the node's ramdisk runs
// (a deploy's prepare_instance_boot sets disk) is kept across an agent
// restart, as a BMC keeps it: the ramdisk still resumes, and a reboot by
// the restarted agent boots from disk, not a second ramdisk.
func TestBootDeviceKept(t *testing.T) {
	out := &bootLogBuffer{}
	store := &memStore{m: map[string][]byte{}}
	start := func(tr *recorder) (*Sim, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		s := New(Config{Site: "s1", Log: slog.New(slog.NewTextHandler(out, nil)), Opts: Options{Nodes: 1, Heartbeat: 50 * time.Millisecond},
			Transport: tr, Context: func() context.Context { return ctx }})
		if err := s.Restore(store); err != nil {
			t.Fatal(err)
		}
		return s, cancel
	}
	tr := &recorder{}
	s, kill := start(tr)
	ctx := context.Background()
	b, err := s.NewBMC("n1", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.SetBootDevice(ctx, protocol.BootPXE); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPower(ctx, protocol.PowerReboot); err != nil {
		t.Fatal(err)
	}
	hello := tr.await(t, "hello", func(m *protocol.Message) bool { return m.Kind == protocol.KindHello })
	if err := b.SetBootDevice(ctx, protocol.BootDisk); err != nil {
		t.Fatal(err)
	}
	kill()
	tr2 := &recorder{}
	s2, kill2 := start(tr2)
	defer kill2()
	tr2.await(t, "the resumed ramdisk's hello", func(m *protocol.Message) bool { return m.Kind == protocol.KindHello && m.BootID == hello.BootID })
	b2, err := s2.NewBMC("n1", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := b2.SetPower(ctx, protocol.PowerReboot); err != nil {
		t.Fatal(err)
	}
	if l := out.lines(BootLog); len(l) != 1 {
		t.Fatalf("%d ramdisk boots after a reboot with the boot device set to disk before the restart, want 1: %q", len(l), l)
	}
}
