package cli

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// followPower polls a node after a power request until the BMC has
// answered (no target_power_state, no lock): exit 0 when it is in want,
// 1 with last_error when it is not, 2 when limit passes, 130 on Ctrl-C
// (the request carries on at the coordinator either way).
func (c *cmd) followPower(cl *client, id, what, want string, limit time.Duration) error {
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fc := *cl
	fc.ctx = ctx
	p := newProgress(c.out)
	defer p.end()
	start := time.Now()
	for {
		n, err := c.getNode(&fc, id)
		if ctx.Err() != nil {
			p.end()
			fmt.Fprintf(c.err, "interrupted: only the waiting stopped; the power %s of node %s carries on at the coordinator ('coordinator node show %s -c power_state')\n", what, id, id)
			return exitCode(130)
		}
		if err != nil {
			p.end()
			return err
		}
		power, _ := n["power_state"].(string)
		target, _ := n["target_power_state"].(string)
		resv, _ := n["reservation"].(string)
		line := power
		if power == "" {
			line = "power unknown"
		}
		if target != "" {
			line += " → " + target
		}
		p.update(time.Since(start), id, line)
		if target == "" && resv == "" {
			p.end()
			// The request cleared last_error when it started: one now is
			// this action's failure, even when the node was already
			// recorded in the state asked for.
			le, _ := n["last_error"].(string)
			if power == want && le == "" {
				return nil
			}
			msg := fmt.Sprintf("error: node %s: power %s ended in %s, not %s", id, what, line, want)
			if power == want {
				msg = fmt.Sprintf("error: node %s: power %s failed (the node is recorded %s)", id, what, line)
			}
			if le != "" {
				msg += ": " + le
			}
			fmt.Fprintln(c.err, msg)
			return exitCode(1)
		}
		if limit > 0 && time.Since(start) > limit {
			p.end()
			fmt.Fprintf(c.err, "error: node %s is still %s after %s; the power %s carries on at the coordinator\n", id, line, limit, what)
			return exitCode(2)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollInterval):
		}
	}
}

// retrySentence says, for a 202 of the steps API, what its message and
// its Retry-Request-After header (seconds; -1 when no time is known)
// mean, as a sentence instead of the raw header.
func retrySentence(msg, after, id string) string {
	msg = strings.TrimSpace(msg)
	if n, err := strconv.Atoi(strings.TrimSpace(after)); err == nil && n > 0 {
		return fmt.Sprintf("%s Ask again in %d seconds.", msg, n)
	}
	msg = strings.TrimSuffix(strings.TrimSuffix(msg, "Retry later."), " ")
	return fmt.Sprintf("%s Only the driver's out-of-band steps are listed until then: ask again once the ramdisk of node %s has booted ('coordinator node inspect %s --wait' boots it).", msg, id, id)
}
