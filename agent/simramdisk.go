package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
)

// ramdisk is a simulated ramdisk agent on one node: it speaks the same
// protocol as the real one (hello, welcome, heartbeats with the token,
// steps with progress, results through the outbox) without a disk.
type ramdisk struct {
	a      *Agent
	node   string
	opts   SimOptions
	bootID string
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	token   string
	running string // command id of the running step
	prog    float64
	steps   map[string]context.CancelFunc
	done    map[string]bool
	// inbox keeps the coordinator's messages in order: a step command
	// must not overtake the welcome that carries its token.
	inbox chan *protocol.Message
}

func newRamdisk(a *Agent, node string, opts SimOptions) *ramdisk {
	ctx, cancel := context.WithCancel(a.ctx)
	return &ramdisk{a: a, node: node, opts: opts, bootID: newID(), ctx: ctx, cancel: cancel,
		steps: map[string]context.CancelFunc{}, done: map[string]bool{}, inbox: make(chan *protocol.Message, 256)}
}

// deliver queues a message for the ramdisk without blocking the link.
func (r *ramdisk) deliver(m *protocol.Message) {
	select {
	case r.inbox <- m:
	default:
		r.a.log.Warn("ramdisk inbox full; message dropped (the coordinator resends)", "node", r.node)
	}
}

func (r *ramdisk) serveInbox() {
	for {
		select {
		case <-r.ctx.Done():
			return
		case m := <-r.inbox:
			r.onMessage(m)
		}
	}
}

func (r *ramdisk) stop() { r.cancel() }

func (r *ramdisk) sleep(d time.Duration) bool {
	if d <= 0 {
		return r.ctx.Err() == nil
	}
	select {
	case <-r.ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func wire(steps []drivers.Step) []protocol.Step {
	out := make([]protocol.Step, 0, len(steps))
	for _, s := range steps {
		out = append(out, protocol.Step{Interface: s.Interface, Step: s.Step, Priority: s.Priority, Abortable: s.Abortable})
	}
	return out
}

func (r *ramdisk) evt() string { return protocol.NodeEvtTopic(r.a.cfg.Site, r.node) }

func (r *ramdisk) run() {
	go r.serveInbox()
	if !r.sleep(r.opts.BootDelay) {
		return
	}
	hello := &protocol.Message{Kind: protocol.KindHello, Site: r.a.cfg.Site, Node: r.node, BootID: r.bootID,
		CleanSteps: wire(drivers.InbandCleanSteps()), DeploySteps: wire(drivers.InbandDeploySteps())}
	// Say hello until welcomed (the welcome may be lost), then heartbeat.
	for {
		r.mu.Lock()
		tok := r.token
		r.mu.Unlock()
		if tok != "" {
			break
		}
		hello.ID, hello.Sent = newID(), time.Now()
		b, _ := protocol.Encode(hello)
		r.a.publish(r.evt(), b)
		if !r.sleep(2 * time.Second) {
			return
		}
	}
	// Jitter spreads the heartbeats of many nodes.
	if !r.sleep(time.Duration(rand.Int64N(int64(r.opts.Heartbeat)))) {
		return
	}
	tk := time.NewTicker(r.opts.Heartbeat)
	defer tk.Stop()
	for {
		r.heartbeat()
		select {
		case <-r.ctx.Done():
			return
		case <-tk.C:
		}
	}
}

func (r *ramdisk) heartbeat() {
	r.mu.Lock()
	hb := &protocol.Message{Kind: protocol.KindHeartbeat, ID: newID(), Site: r.a.cfg.Site, Node: r.node, Sent: time.Now(),
		Token: r.token, Running: r.running, Progress: r.prog}
	r.mu.Unlock()
	b, err := protocol.Encode(hb)
	if err == nil {
		r.a.publish(r.evt(), b)
	}
}

func (r *ramdisk) onMessage(m *protocol.Message) {
	if r.ctx.Err() != nil {
		return
	}
	switch m.Kind {
	case protocol.KindWelcome:
		if m.BootID != "" && m.BootID != r.bootID {
			return
		}
		r.mu.Lock()
		r.token = m.Token
		r.mu.Unlock()
	case protocol.KindCommand:
		r.mu.Lock()
		tok := r.token
		r.mu.Unlock()
		if m.Token != tok || tok == "" {
			r.a.log.Warn("ramdisk: command with a wrong token ignored", "node", r.node, "command", m.ID)
			return
		}
		switch m.Action {
		case protocol.ActionInbandRun:
			r.startStep(m)
		case protocol.ActionAbort:
			id, _ := m.Args["command_id"].(string)
			r.mu.Lock()
			if c := r.steps[id]; c != nil {
				c()
			}
			r.mu.Unlock()
		}
	}
}

func (r *ramdisk) startStep(m *protocol.Message) {
	r.mu.Lock()
	if r.done[m.ID] || r.steps[m.ID] != nil {
		// Duplicate: the result is in the outbox already, or on its way.
		r.mu.Unlock()
		r.a.mu.Lock()
		d, ok := r.a.done[m.ID]
		if ok {
			r.a.outbox[d.id] = outItem{topic: d.topic, payload: d.payload, sent: time.Now()}
		}
		r.a.mu.Unlock()
		if ok {
			r.a.publish(d.topic, d.payload)
		}
		return
	}
	ctx, cancel := context.WithCancel(r.ctx)
	r.steps[m.ID] = cancel
	r.running, r.prog = m.ID, 0
	r.mu.Unlock()
	go func() {
		defer cancel()
		data, err := r.execute(ctx, m)
		r.mu.Lock()
		delete(r.steps, m.ID)
		r.done[m.ID] = true
		r.running, r.prog = "", 0
		tok := r.token
		r.mu.Unlock()
		if ctx.Err() != nil {
			return // aborted or powered off: no result
		}
		res := &protocol.Message{Kind: protocol.KindResult, ID: newID(), Site: r.a.cfg.Site, Node: r.node, Sent: time.Now(),
			Token: tok, CommandID: m.ID, OK: err == nil, Data: data}
		if err != nil {
			res.Error = err.Error()
		}
		r.a.send(r.evt(), res)
	}()
	// Tell the coordinator at once that the step runs (no more resends).
	r.heartbeat()
}

func (r *ramdisk) execute(ctx context.Context, m *protocol.Message) (map[string]any, error) {
	name := m.Step.Step
	if name == r.opts.DieStep {
		// The agent dies mid-step: no result, no heartbeat, ever.
		r.sleep(r.opts.StepDuration / 2)
		r.cancel()
		return nil, context.Canceled
	}
	switch m.Step.Interface + "." + name {
	case "deploy.erase_devices", "deploy.erase_devices_metadata", "deploy.write_image", "deploy.inspect_hardware", "rescue.finalize_rescue":
	default:
		return nil, fmt.Errorf("the ramdisk has no step %s.%s", m.Step.Interface, name)
	}
	if name == "write_image" {
		if s, _ := m.Step.Args["image_source"].(string); s == "" {
			return nil, fmt.Errorf("write_image needs image_source")
		}
	}
	const ticks = 10
	for i := 1; i <= ticks; i++ {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(r.opts.StepDuration / ticks):
		}
		r.mu.Lock()
		r.prog = float64(i) / ticks
		r.mu.Unlock()
	}
	if name == r.opts.FailStep {
		return nil, fmt.Errorf("simulated failure of step %s", name)
	}
	if name == "inspect_hardware" {
		return r.inventory(), nil
	}
	return nil, nil
}

// inventory is a plausible hardware report, stable per node.
func (r *ramdisk) inventory() map[string]any {
	h := 0
	for _, c := range r.node {
		h = h*31 + int(c)
	}
	if h < 0 {
		h = -h
	}
	cpus := 8 << (h % 3)
	memMB := 16384 << (h % 4)
	diskGB := 480 << (h % 3)
	mac := fmt.Sprintf("52:54:00:%02x:%02x:%02x", (h>>16)&0xff, (h>>8)&0xff, h&0xff)
	return map[string]any{
		"inventory": map[string]any{
			"cpu":           map[string]any{"count": cpus, "architecture": "x86_64", "model_name": "Simulated CPU"},
			"memory":        map[string]any{"total_bytes": int64(memMB) << 20, "physical_mb": memMB},
			"disks":         []any{map[string]any{"name": "/dev/sda", "size": int64(diskGB) << 30, "rotational": false, "serial": "SIM" + r.node[:8]}},
			"interfaces":    []any{map[string]any{"name": "eth0", "mac_address": mac, "has_carrier": true}},
			"system_vendor": map[string]any{"manufacturer": "bmedge", "product_name": "simulated node", "serial_number": r.node[:8]},
			"boot":          map[string]any{"current_boot_mode": "uefi"},
		},
		"properties": map[string]any{"cpus": cpus, "memory_mb": memMB, "local_gb": diskGB - 1, "cpu_arch": "x86_64"},
	}
}
