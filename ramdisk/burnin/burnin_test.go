package burnin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCPU(t *testing.T) {
	res, err := CPU(t.Context(), CPUOptions{Duration: 200 * time.Millisecond, Workers: 2})
	if err != nil || res.Workers != 2 || res.Rounds == 0 || res.Errors != 0 || res.RoundsPerSecond <= 0 {
		t.Fatalf("CPU = %+v, %v", res, err)
	}
}

func TestMemorySize(t *testing.T) {
	const avail = 1000 << 20
	ceiling := uint64(avail/100*MemoryCeilingPercent-MemoryReserve) &^ (1<<20 - 1)
	for spec, want := range map[string]uint64{"": ceiling, "10%": 100 << 20, "64M": 64 << 20, "1G": ceiling, "99%": ceiling, "5242880": 5 << 20} {
		if got, err := MemorySize(spec, avail); err != nil || got != want {
			t.Errorf("MemorySize(%q) = %d, %v; want %d", spec, got, err, want)
		}
	}
	for _, spec := range []string{"lots", "0", "-5%", "120%", "12X"} {
		if _, err := MemorySize(spec, avail); err == nil {
			t.Errorf("MemorySize(%q) accepted", spec)
		}
	}
	if _, err := MemorySize("", 64<<20); err == nil || !strings.Contains(err.Error(), "needs more than") {
		t.Errorf("tiny memory: %v", err)
	}
}

func TestMemory(t *testing.T) {
	mi := filepath.Join(t.TempDir(), "meminfo")
	os.WriteFile(mi, []byte("MemTotal: 2048000 kB\nMemAvailable:    1024000 kB\n"), 0o644)
	res, err := Memory(t.Context(), MemoryOptions{Duration: 300 * time.Millisecond, Workers: 2, Bytes: "8M", MeminfoPath: mi})
	if err != nil || res.TestedBytes != 8<<20 || res.BytesChecked < 8<<20 || res.Passes < 1 || res.Errors != 0 || res.MBps <= 0 {
		t.Fatalf("Memory = %+v, %v", res, err)
	}
}

// The check finds a word that changed, and where.
func TestCheckWordsFindsAFlippedBit(t *testing.T) {
	part := make([]uint64, 1<<10)
	n := fillWords(t.Context(), part, 4096, 7, true, time.Now().Add(time.Hour))
	if bad, _, _, _ := checkWords(part[:n], 4096, 7, true); n != len(part) || bad != 0 {
		t.Fatalf("clean memory: %d words filled, %d bad", n, bad)
	}
	part[100] ^= 1 << 33
	bad, at, got, want := checkWords(part, 4096, 7, true)
	if bad != 1 || at != 4096+800 || got^want != 1<<33 {
		t.Fatalf("bad %d at %d (got %x want %x)", bad, at, got, want)
	}
}
