package ipmi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bougou/go-ipmi/pkg/client"
)

// RunStep implements drivers.BMC: the IPMI driver's out-of-band steps
// (drivers.IPMIDeclaration): management.reset_bmc.
func (b *BMC) RunStep(ctx context.Context, iface, step string, args map[string]any) error {
	switch iface + "." + step {
	case "management.reset_bmc":
		return b.ResetBMC(ctx)
	}
	return fmt.Errorf("IPMI driver has no step %s.%s; its out-of-band step is management.reset_bmc", iface, step)
}

// ResetBMC cold-resets the BMC (IPMI Cold Reset, what "ipmitool mc reset
// cold" sends) and waits until it answers again with a new session. The
// request is sent once, never retried: a BMC may reset before it answers,
// so a lost answer is taken as "resetting", and the verdict is whether the
// BMC comes back within Options.ResetTimeout. IPMI offers no way to prove
// that a reset happened; a BMC that answers that it does not implement
// the command (ipmi_sim does: 0xc1) makes the step fail saying so.
func (b *BMC) ResetBMC(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	err := b.do(ctx, "cold-reset itself (management.reset_bmc)", 0, func(ctx context.Context, c *client.Client) error {
		return c.ColdReset(ctx)
	})
	switch {
	case errors.Is(err, ErrUnsupported):
		return fmt.Errorf("%w; management.reset_bmc cannot run on this BMC: reset it from its own interface or by removing its power", err)
	case err != nil && !errors.Is(err, ErrNoAnswer):
		return err
	}
	// The session dies with the BMC.
	b.drop()

	settle := time.NewTimer(b.opts.ResetSettle)
	select {
	case <-ctx.Done():
		settle.Stop()
		return fmt.Errorf("IPMI BMC %s: gave up waiting for the BMC to come back from its cold reset: %w", b.cfg.addr(), ctx.Err())
	case <-settle.C:
	}
	wctx, cancel := context.WithTimeout(ctx, b.opts.ResetTimeout)
	defer cancel()
	for {
		err := b.do(wctx, "answer after its cold reset", 0, func(ctx context.Context, c *client.Client) error {
			_, err := c.GetDeviceID(ctx)
			return err
		})
		if err == nil || errors.Is(err, ErrRefused) {
			return err
		}
		if wctx.Err() != nil {
			return fmt.Errorf("IPMI BMC %s did not come back within %s of its cold reset: %w", b.cfg.addr(), b.opts.ResetTimeout, err)
		}
		t := time.NewTimer(b.opts.PowerPoll)
		select {
		case <-wctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}
