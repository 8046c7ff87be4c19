package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/bmedge/bmedge/agent/sim"
)

// TestCountBootsDoubleBoot counts the boot lines of an agent log written
// by slog's text handler (as the agent program's), with a node that
// booted twice (an agent killed after the BMC action and before its
// result was kept, which ran the resent command again), and fails the
// phase naming it.
func TestCountBootsDoubleBoot(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(slog.NewTextHandler(&b, nil))
	log.Info(sim.BootLog, "node", "n1", "boot", "b1")
	log.Info("power command run", "node", "n2")
	log.Info(sim.BootLog, "node", "n2", "boot", "b2")
	b.WriteString("garbage cut by a SIGKILL: msg=\"simulated node bo\n")
	// n1's boot resumed by a restarted agent: the same boot, once.
	log.Info(sim.ResumeLog, "node", "n1", "boot", "b1")
	log.Info(sim.BootLog, "node", "n2", "boot", "b3")
	// n3's boot kept just before a kill that cut its BootLog line: counted
	// by its resume line.
	log.Info(sim.ResumeLog, "node", "n3", "boot", "b4")
	boots, err := countBoots(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if boots["n1"] != 1 || boots["n2"] != 2 || boots["n3"] != 1 || len(boots) != 3 {
		t.Fatalf("boots %v, want n1 once, n2 twice, n3 once", boots)
	}
	c := checkBoots("phase 3 (active)", []string{"n1", "n2", "n3", "n4"}, boots)
	if c.once != 2 || c.none != 1 || len(c.twice) != 1 || c.total != 4 {
		t.Fatalf("check %+v", c)
	}
	err = c.err(true)
	if err == nil || !strings.Contains(err.Error(), "n2 (2 boots)") || !strings.Contains(err.Error(), "phase 3 (active)") {
		t.Fatalf("err %v, want phase 3 failed naming n2", err)
	}
	// Each node once: no error.
	if err := checkBoots("p", []string{"n1"}, map[string]int{"n1": 1}).err(true); err != nil {
		t.Fatal(err)
	}
	// A booting phase without any boot line: the agent does not log them.
	if err := checkBoots("p", []string{"n1"}, map[string]int{}).err(true); err == nil {
		t.Fatal("no boot line at all passed")
	}
}
