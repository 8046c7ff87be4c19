package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/protocol"
	"github.com/bmedge/bmedge/protocol/session"
)

// simRunner is the hardware of a simulated node: its in-band steps take
// StepDuration, can be made to fail or to kill the agent, and inspection
// reports a plausible inventory. The protocol around it is the real
// ramdisk's (protocol/session).
type simRunner struct {
	a    *Agent
	node string
	opts SimOptions
	// reboot restarts the node's simulated ramdisk as a new boot.
	reboot func()
}

func wire(steps []drivers.Step) []protocol.Step {
	out := make([]protocol.Step, 0, len(steps))
	for _, s := range steps {
		out = append(out, protocol.Step{Interface: s.Interface, Step: s.Step, Priority: s.Priority, Abortable: s.Abortable})
	}
	return out
}

// Steps implements session.Runner.
func (r *simRunner) Steps() (clean, deploy []protocol.Step) {
	return wire(drivers.InbandCleanSteps()), wire(drivers.InbandDeploySteps())
}

// Run implements session.Runner.
func (r *simRunner) Run(ctx context.Context, step protocol.Step, progress func(float64, string)) (map[string]any, error) {
	name := step.Step
	if name == r.opts.DieStep || name == r.opts.RebootStep {
		select {
		case <-ctx.Done():
		case <-time.After(r.opts.StepDuration / 2):
		}
		if name == r.opts.RebootStep && ctx.Err() == nil {
			r.reboot()
		}
		return nil, session.ErrDied
	}
	switch step.Interface + "." + name {
	case "deploy.erase_devices", "deploy.erase_devices_metadata", "deploy.write_image", "deploy.inspect_hardware", "rescue.finalize_rescue":
	default:
		return nil, fmt.Errorf("the ramdisk has no step %s.%s", step.Interface, name)
	}
	if name == "write_image" {
		s, _ := step.Args["image_source"].(string)
		if s == "" {
			return nil, fmt.Errorf("write_image needs image_source")
		}
		if err := r.a.simFetchImage(ctx, s, step.Args); err != nil {
			return nil, err
		}
	}
	const ticks = 10
	for i := 1; i <= ticks; i++ {
		if r.opts.StepDuration > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(r.opts.StepDuration / ticks):
			}
		}
		progress(float64(i)/ticks, "")
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
func (r *simRunner) inventory() map[string]any {
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
	short := r.node
	if len(short) > 8 {
		short = short[:8]
	}
	return map[string]any{
		"inventory": map[string]any{
			"cpu":           map[string]any{"count": cpus, "architecture": "x86_64", "model_name": "Simulated CPU"},
			"memory":        map[string]any{"total_bytes": int64(memMB) << 20, "physical_mb": memMB},
			"disks":         []any{map[string]any{"name": "/dev/sda", "size": int64(diskGB) << 30, "rotational": false, "serial": "SIM" + short}},
			"interfaces":    []any{map[string]any{"name": "eth0", "mac_address": mac, "has_carrier": true}},
			"system_vendor": map[string]any{"manufacturer": "bmedge", "product_name": "simulated node", "serial_number": short},
			"boot":          map[string]any{"current_boot_mode": "uefi"},
		},
		"properties": map[string]any{"cpus": cpus, "memory_mb": memMB, "local_gb": diskGB - 1, "cpu_arch": "x86_64"},
	}
}

// agentTransport hands a simulated node's messages to the edge agent's
// relay, as the site broker does a real ramdisk's (relay.go).
type agentTransport struct{ a *Agent }

func (t agentTransport) Publish(ctx context.Context, topic string, payload []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.a.fromRamdisk(topic, payload)
	return nil
}
