// Package fake is a BMC that exists only in memory: power and boot device
// state, configurable delays and injected failures. The simulated site and
// unit tests use it; it must never be the only test of a feature.
package fake

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bmedge/bmedge/protocol"
)

// Options shape a fake BMC's behaviour.
type Options struct {
	// Delay is how long each BMC action takes.
	Delay time.Duration
	// FailPower makes every power action fail with this text.
	FailPower string
	// FailValidate makes validation fail with this text (bad credentials).
	FailValidate string
	// OnPower is told of every power change with the boot device in force.
	OnPower func(state, bootDevice string)
	// OnBootDevice is told of every boot device set, once it is in force.
	OnBootDevice func(device string)
	// Power and BootDevice are the state it starts in ("": powered off,
	// booting from disk), as a real BMC keeps its state while the agent
	// that drives it restarts.
	Power, BootDevice string
}

// BMC is one fake BMC.
type BMC struct {
	opts  Options
	mu    sync.Mutex
	power string
	boot  string
}

// New returns a powered-off fake BMC booting from disk.
// BootsRamdiskItself implements drivers.SelfBooter: the simulated node starts its simulated ramdisk at power-on.
func (b *BMC) BootsRamdiskItself() {}

func New(opts Options) *BMC {
	b := &BMC{opts: opts, power: protocol.PowerOff, boot: protocol.BootDisk}
	if opts.Power != "" {
		b.power = opts.Power
	}
	if opts.BootDevice != "" {
		b.boot = opts.BootDevice
	}
	return b
}

func (b *BMC) wait(ctx context.Context) error {
	if b.opts.Delay <= 0 {
		return ctx.Err()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(b.opts.Delay):
		return nil
	}
}

// Validate implements drivers.BMC.
func (b *BMC) Validate(ctx context.Context) error {
	if err := b.wait(ctx); err != nil {
		return err
	}
	if b.opts.FailValidate != "" {
		return fmt.Errorf("fake BMC refused the credentials: %s", b.opts.FailValidate)
	}
	return nil
}

// SetPower implements drivers.BMC.
func (b *BMC) SetPower(ctx context.Context, state string) error {
	if err := b.wait(ctx); err != nil {
		return err
	}
	if b.opts.FailPower != "" {
		return fmt.Errorf("fake BMC power failure: %s", b.opts.FailPower)
	}
	b.mu.Lock()
	switch state {
	case protocol.PowerOn, protocol.PowerReboot:
		b.power = protocol.PowerOn
	case protocol.PowerOff:
		b.power = protocol.PowerOff
	default:
		b.mu.Unlock()
		return fmt.Errorf("fake BMC: unknown power state %q", state)
	}
	boot := b.boot
	b.mu.Unlock()
	if b.opts.OnPower != nil {
		b.opts.OnPower(state, boot)
	}
	return nil
}

// PowerState implements drivers.BMC.
func (b *BMC) PowerState(ctx context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.power, nil
}

// SetBootDevice implements drivers.BMC.
func (b *BMC) SetBootDevice(ctx context.Context, device string) error {
	if err := b.wait(ctx); err != nil {
		return err
	}
	if device != protocol.BootPXE && device != protocol.BootDisk {
		return fmt.Errorf("fake BMC: unknown boot device %q", device)
	}
	b.mu.Lock()
	b.boot = device
	b.mu.Unlock()
	if b.opts.OnBootDevice != nil {
		b.opts.OnBootDevice(device)
	}
	return nil
}

// BootDevice returns the boot device in force.
func (b *BMC) BootDevice() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.boot
}

// RunStep implements drivers.BMC: the fake driver's step and the shared
// deploy steps (boot device, power) that run out of band.
func (b *BMC) RunStep(ctx context.Context, iface, step string, args map[string]any) error {
	switch iface + "." + step {
	case "management.fake_reset_bmc":
		d, _ := args["delay"].(float64)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(d * float64(time.Second))):
		}
		return nil
	case "bios.apply_configuration":
		// The fake BMC keeps no BIOS: it checks the settings' shape only.
		if l, ok := args["settings"].([]any); !ok || len(l) == 0 {
			return fmt.Errorf("fake BMC: step bios.apply_configuration needs settings, a non-empty list of {\"name\": ..., \"value\": ...}")
		}
		return b.wait(ctx)
	}
	return fmt.Errorf("fake BMC has no step %s.%s", iface, step)
}
