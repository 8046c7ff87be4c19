package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/bmedge/bmedge/agent/sim"
)

// Ramdisk boots per node: the edge agent's simulated BMCs log a line
// (sim.BootLog, attributes node and boot) for each ramdisk boot they
// perform, once it is kept in the state folder, so that the count is of
// boots that happened, where they happened, across the agent's restarts
// (each restarted agent appends to the same log file). The coordinator's
// history is not the source: it takes a second boot that says hello
// before any step ran as replacing the first, without a failure.

// logOffset is the size of the agent's log now: where a phase's boots
// begin.
func (e *edge) logOffset() int64 {
	fi, err := os.Stat(e.LogFile)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// bootsSince counts the ramdisk boots of each node in the agent's log
// from offset on.
func (e *edge) bootsSince(offset int64) (map[string]int, error) {
	f, err := os.Open(e.LogFile)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	return countBoots(f)
}

// countBoots counts the distinct boots of each node in an agent log
// (slog's text format: msg="..." node=UUID boot=ID): those of sim.BootLog
// lines and those of sim.ResumeLog lines, so that a boot kept just before
// a kill, whose BootLog line the kill cut, counts by the line of the
// agent that resumed it, and a boot logged and then resumed counts once.
func countBoots(r io.Reader) (map[string]int, error) {
	wants := []string{fmt.Sprintf("msg=%q ", sim.BootLog), fmt.Sprintf("msg=%q ", sim.ResumeLog)}
	seen := map[[2]string]bool{}
	boots := map[string]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		l := sc.Text()
		i, n := -1, 0
		for _, w := range wants {
			if i = strings.Index(l, w); i >= 0 {
				n = len(w)
				break
			}
		}
		if i < 0 {
			continue
		}
		node, boot := "", ""
		for _, f := range strings.Fields(l[i+n:]) {
			if v, ok := strings.CutPrefix(f, "node="); ok {
				node = strings.Trim(v, `"`)
			}
			if v, ok := strings.CutPrefix(f, "boot="); ok {
				boot = strings.Trim(v, `"`)
			}
		}
		if node == "" || boot == "" {
			return boots, fmt.Errorf("a boot line of the agent's log names no node or no boot: %s", l)
		}
		if !seen[[2]string{node, boot}] {
			seen[[2]string{node, boot}] = true
			boots[node]++
		}
	}
	return boots, sc.Err()
}

// bootCheck is one phase's count: of the nodes the soak drives, how
// many booted their ramdisk not at all, once, and more than once (those
// named, with their count).
type bootCheck struct {
	phase      string
	none, once int
	twice      []string // "uuid (n boots)", sorted
	total      int
}

// checkBoots sorts boots (per node) into a bootCheck for the nodes
// uuids.
func checkBoots(phase string, uuids []string, boots map[string]int) bootCheck {
	c := bootCheck{phase: phase}
	for _, u := range uuids {
		switch n := boots[u]; {
		case n == 0:
			c.none++
		case n == 1:
			c.once++
		default:
			c.twice = append(c.twice, fmt.Sprintf("%s (%d boots)", u, n))
		}
	}
	for _, n := range boots {
		c.total += n
	}
	sort.Strings(c.twice)
	return c
}

func (c bootCheck) String() string {
	return fmt.Sprintf("%s: ramdisk boots %d: %d nodes once, %d not at all, %d more than once", c.phase, c.total, c.once, c.none, len(c.twice))
}

// err fails the phase when a node booted more than once (naming them,
// at most 20), or when booting phases saw no boot at all (an agent that
// does not log its boots: the check would count nothing).
func (c bootCheck) err(boots bool) error {
	if len(c.twice) > 0 {
		names := c.twice
		more := ""
		if len(names) > 20 {
			names, more = names[:20], fmt.Sprintf(" and %d more", len(c.twice)-20)
		}
		return fmt.Errorf("%s: %d nodes booted their ramdisk more than once: %s%s", c.phase, len(c.twice), strings.Join(names, ", "), more)
	}
	if boots && c.total == 0 {
		return fmt.Errorf("%s: the edge agent's log has no ramdisk boot at all (%q lines): an agent built before it logged them cannot be checked for double boots", c.phase, sim.BootLog)
	}
	return nil
}
