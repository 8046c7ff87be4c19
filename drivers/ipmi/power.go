package ipmi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/chassis"

	"github.com/bmedge/bmedge/protocol"
)

// PowerState implements drivers.BMC: "power on" or "power off" as the
// BMC's chassis status reports it.
func (b *BMC) PowerState(ctx context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	on, err := b.powerIsOn(ctx)
	if err != nil {
		return "", err
	}
	return powerName(on), nil
}

func powerName(on bool) string {
	if on {
		return protocol.PowerOn
	}
	return protocol.PowerOff
}

// SetPower implements drivers.BMC: "power on", "power off" (hard, as
// Ironic's power off) or "rebooted", each waiting until the BMC reports
// the requested state. A node already in the requested state is left
// alone, as some BMCs answer an error to powering off what is off. Reboot
// is what Ironic's ipmitool driver does: power off (if on), wait for off,
// power on, wait for on; so rebooting a powered-off node powers it on, and
// the BMC's own power cycle, which many BMCs refuse on a node that is off,
// is not used.
func (b *BMC) SetPower(ctx context.Context, state string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch state {
	case protocol.PowerOn, protocol.PowerOff:
		want := state == protocol.PowerOn
		on, err := b.powerIsOn(ctx)
		if err != nil {
			return err
		}
		if on == want {
			return nil
		}
		return b.switchPower(ctx, want)
	case protocol.PowerReboot:
		on, err := b.powerIsOn(ctx)
		if err != nil {
			return err
		}
		if on {
			if err := b.switchPower(ctx, false); err != nil {
				return fmt.Errorf("reboot: %w", err)
			}
		}
		if err := b.switchPower(ctx, true); err != nil {
			return fmt.Errorf("reboot: %w", err)
		}
		return nil
	}
	return fmt.Errorf("IPMI driver: unknown power state %q; use %q, %q or %q", state, protocol.PowerOn, protocol.PowerOff, protocol.PowerReboot)
}

// SoftPowerOff asks the OS to shut down (an ACPI soft-off through the
// BMC), waits up to timeout (zero: Options.SoftPowerOffTimeout) for the
// node to be off, and otherwise powers it off by force, as Ironic's soft
// power off does. forced says whether the force was needed. A BMC that
// refuses the soft request is an error: nothing is forced behind the
// caller's back then.
func (b *BMC) SoftPowerOff(ctx context.Context, timeout time.Duration) (forced bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if timeout <= 0 {
		timeout = b.opts.SoftPowerOffTimeout
	}
	on, err := b.powerIsOn(ctx)
	if err != nil || !on {
		return false, err
	}
	if err := b.control(ctx, "ask the OS to shut down (soft power off)", chassis.ChassisControlSoftShutdown); err != nil {
		return false, err
	}
	err = b.waitPower(ctx, false, timeout, "a soft power off")
	if err == nil || ctx.Err() != nil {
		return false, err
	}
	// Only a node that is still on is forced; a BMC that stopped
	// answering is an error, not a reason to cut the power.
	var still *stillError
	if !errors.As(err, &still) {
		return false, err
	}
	if err := b.switchPower(ctx, false); err != nil {
		return true, fmt.Errorf("the OS did not shut down within %s and the forced power off failed: %w", timeout, err)
	}
	return true, nil
}

// powerIsOn reads the chassis status. The caller holds b.mu.
func (b *BMC) powerIsOn(ctx context.Context) (bool, error) {
	var on bool
	err := b.do(ctx, "report the power state", b.opts.Retries, func(ctx context.Context, c *client.Client) error {
		st, err := c.GetChassisStatus(ctx)
		if err != nil {
			return err
		}
		on = st.PowerIsOn
		return nil
	})
	return on, err
}

// control sends a chassis control command. Power up and down are safe to
// send again when an answer was lost.
func (b *BMC) control(ctx context.Context, what string, ctl chassis.ChassisControl) error {
	return b.do(ctx, what, b.opts.Retries, func(ctx context.Context, c *client.Client) error {
		_, err := c.ChassisControl(ctx, ctl)
		return err
	})
}

// switchPower powers up or down and waits for the BMC to report it.
func (b *BMC) switchPower(ctx context.Context, on bool) error {
	ctl, what := chassis.ChassisControlPowerDown, "power off"
	if on {
		ctl, what = chassis.ChassisControlPowerUp, "power on"
	}
	if err := b.control(ctx, what, ctl); err != nil {
		return err
	}
	return b.waitPower(ctx, on, b.opts.PowerTimeout, what)
}

// stillError is a power change the BMC accepted and did not make.
type stillError struct{ msg string }

func (e *stillError) Error() string { return e.msg }

// waitPower polls until the BMC reports the wanted power state or timeout
// passes; then it says what it saw last.
func (b *BMC) waitPower(ctx context.Context, on bool, timeout time.Duration, action string) error {
	deadline := time.Now().Add(timeout)
	for {
		is, err := b.powerIsOn(ctx)
		if err == nil && is == on {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("IPMI BMC %s: gave up waiting for %s: %w", b.cfg.addr(), powerName(on), ctx.Err())
		}
		if !time.Now().Before(deadline) {
			if err != nil {
				return fmt.Errorf("IPMI BMC %s accepted %s, then could not report the power state within %s: %w", b.cfg.addr(), action, timeout, err)
			}
			return &stillError{fmt.Sprintf("IPMI BMC %s accepted %s but still reports %s after %s", b.cfg.addr(), action, powerName(is), timeout)}
		}
		wait := min(b.opts.PowerPoll, time.Until(deadline))
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}
