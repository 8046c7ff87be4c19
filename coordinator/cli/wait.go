package cli

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/bmedge/bmedge/coordinator/fsm"
)

// pollInterval is how often --wait reads the node.
const pollInterval = 300 * time.Millisecond

func failed(state string) bool {
	return strings.HasSuffix(state, "failed") || state == "error"
}

// follow polls the node until it rests, showing its state and step: one
// live line on a terminal, a plain line per change otherwise. verb is
// the command that started the operation, or "wait". It returns an
// exitCode after saying why on standard error: 1 when the node rests
// anywhere but where the verb was going, 2 when limit passes, 130 on
// Ctrl-C (the operation carries on at the coordinator either way).
func (c *cmd) follow(cl *client, id, verb string, limit time.Duration) error {
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	fc := *cl
	fc.ctx = ctx
	p := newProgress(c.out)
	defer p.end()
	start := time.Now()
	want := ""
	for {
		n, err := c.getNode(&fc, id)
		if ctx.Err() != nil {
			return c.interrupted(p, id, verb)
		}
		if err != nil {
			p.end()
			return err
		}
		state, _ := n["provision_state"].(string)
		target, _ := n["target_provision_state"].(string)
		if want == "" {
			want = target // where the verb is meant to end
		}
		p.update(time.Since(start), id, describe(n, state, target))
		resv, _ := n["reservation"].(string)
		if resv == "" && fsm.IsHold(fsm.State(state)) {
			// A hold step stopped the operation where the operator
			// asked: waiting on would wait for the operator himself.
			p.end()
			fmt.Fprintf(c.err, "node %s is held in %s%s; go on with 'coordinator node unhold %s', or stop with 'coordinator node abort %s'\n",
				id, state, heldBy(n), id, id)
			return nil
		}
		// At rest: unlocked in a stable state (a failed state may keep
		// its target, as Ironic's deploy failed → active does).
		if resv == "" && (target == "" || fsm.Stable(fsm.State(state))) {
			p.end()
			// A verb fails when the node lands in a failed state, or
			// anywhere but where the verb was going (manage's failed
			// verification goes back to enroll), as baremetal --wait.
			missed := want != "" && state != want && !(failed(want) && failed(state))
			if verb != "abort" && (failed(state) || missed || (verb == "manage" && state == "enroll")) {
				le, _ := n["last_error"].(string)
				msg := fmt.Sprintf("node %s: %s ended in %s", id, verb, state)
				if verb == "wait" {
					msg = fmt.Sprintf("node %s rests in %s", id, state)
				}
				if want != "" && state != want {
					msg += ", not " + want
				}
				if le != "" {
					msg += ": " + le
				}
				fmt.Fprintf(c.err, "error: %s\n", msg)
				return exitCode(1)
			}
			return nil
		}
		if limit > 0 && time.Since(start) > limit {
			p.end()
			what := "its operation"
			if verb != "wait" {
				what = "the " + verb
			}
			fmt.Fprintf(c.err, "error: node %s is still in %s after %s; %s carries on at the coordinator: follow it with 'coordinator node wait %s'\n",
				id, state, limit, what, id)
			return exitCode(2)
		}
		select {
		case <-ctx.Done():
			return c.interrupted(p, id, verb)
		case <-time.After(pollInterval):
		}
	}
}

// heldBy names the hold step that holds a node (" by step deploy.hold").
func heldBy(n map[string]any) string {
	for _, k := range []string{"clean_step", "deploy_step", "service_step"} {
		if s, ok := n[k].(map[string]any); ok && s["step"] != nil {
			return fmt.Sprintf(" by step %v.%v", s["interface"], s["step"])
		}
	}
	return ""
}

// interrupted says, after Ctrl-C, that only the waiting stopped.
func (c *cmd) interrupted(p *progress, id, verb string) error {
	p.end()
	if verb == "wait" {
		fmt.Fprintf(c.err, "interrupted: node %s carries on at the coordinator; follow it again with 'coordinator node wait %s'\n", id, id)
	} else {
		fmt.Fprintf(c.err, "interrupted: only the waiting stopped; the %s of node %s carries on at the coordinator.\n"+
			"Follow it with 'coordinator node wait %s'; 'coordinator node abort %s' stops it where it waits.\n", verb, id, id, id)
	}
	return exitCode(130)
}

// describe is a node's state, target, running step and pauses in one
// line.
func describe(n map[string]any, state, target string) string {
	line := state
	if target != "" {
		line += " → " + target
	}
	for _, k := range []string{"clean_step", "deploy_step", "service_step"} {
		if s, ok := n[k].(map[string]any); ok && s["step"] != nil {
			line += fmt.Sprintf("  [%v.%v", s["interface"], s["step"])
			if p, ok := s["progress"].(float64); ok && p > 0 {
				line += fmt.Sprintf(" %d%%", int(p*100))
			}
			line += "]"
		}
	}
	if m, _ := n["maintenance"].(bool); m {
		line += "  (maintenance: paused)"
	}
	if on, ok := n["site_online"].(bool); ok && !on {
		line += "  (site offline: waiting for it)"
	}
	return line
}

// progress shows a followed node: on a terminal one line redrawn in
// place with the time so far, elsewhere a line per change.
type progress struct {
	w     io.Writer
	tty   bool
	width int
	last  string
	drawn bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	p.width, p.tty = terminalWidth(w)
	if os.Getenv("TERM") == "dumb" {
		p.tty = false
	}
	return p
}

func (p *progress) update(elapsed time.Duration, id, line string) {
	if !p.tty {
		if line != p.last {
			fmt.Fprintf(p.w, "%6.1fs  %s: %s\n", elapsed.Seconds(), id, line)
			p.last = line
		}
		return
	}
	s := fmt.Sprintf("%s: %s  (%s)", id, line, elapsed.Truncate(time.Second))
	if max := p.width - 1; max > 0 && utf8.RuneCountInString(s) > max {
		r := []rune(s)
		s = string(r[:max-1]) + "…"
	}
	// Carriage return, the line, erase to its end.
	fmt.Fprintf(p.w, "\r%s\x1b[K", s)
	p.drawn = true
}

// end ends the live line, so that what follows starts on its own.
func (p *progress) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}
