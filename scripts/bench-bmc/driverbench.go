package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/bmedge/bmedge/drivers/redfish"
	"github.com/bmedge/bmedge/drivers/redfish/recorded"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
	"github.com/bmedge/bmedge/protocol"
)

// driverBench measures the Redfish driver alone against one BMC that
// answers each request after a delay: a recorded tree
// (drivers/redfish/recorded) or the virtual BMC ("vbmc"). It runs what
// the edge agent runs for a manage (Validate, then the firmware and BIOS
// readings), an out-of-band inspection and a power off and on, and
// prints each one's requests and seconds.
func driverBench(fixture string, delay time.Duration, verbose bool) error {
	const user, pw = "admin", "bench-password"
	var url string
	var count func() int64
	var reset func()
	var log func() []string
	if fixture == "vbmc" {
		m := vbmc.NewMemoryMachine(vbmc.MemoryOptions{})
		b, err := vbmc.New(vbmc.Config{Username: user, Password: pw, Systems: []vbmc.SystemConfig{{Machine: m}}})
		if err != nil {
			return err
		}
		defer b.Close()
		b.SetFaults(vbmc.Faults{Latency: delay})
		c := &counter{h: b}
		s, err := vbmc.Serve(c, vbmc.ServeOptions{Addr: "127.0.0.1:0"})
		if err != nil {
			return err
		}
		defer s.Close()
		url, count, reset = s.URL, func() int64 { return c.n.Load() }, func() { c.n.Store(0) }
	} else {
		s, err := recorded.Start(recorded.Options{Fixture: fixture, Username: user, Password: pw, Delay: delay, Quirks: recorded.Profiles[fixture]})
		if err != nil {
			return err
		}
		defer s.Close()
		url = s.URL
		count = func() int64 { return int64(len(s.Requests())) }
		reset = s.ResetRequests
		log = s.Requests
	}
	var logw io.Writer = io.Discard
	if verbose {
		logw = os.Stderr
	}
	d, err := redfish.New(map[string]any{redfish.InfoAddress: url, redfish.InfoUsername: user, redfish.InfoPassword: pw},
		redfish.Options{Logger: slog.New(slog.NewTextHandler(logw, nil)), PollInterval: delay})
	if err != nil {
		return err
	}
	defer d.Close()
	ctx := context.Background()
	fmt.Printf("driver bench: %s, every request answered after %s\n", fixture, delay)
	fmt.Printf("%-36s %9s %9s\n", "operation", "requests", "seconds")
	measure := func(name string, f func() error) {
		reset()
		start := time.Now()
		err := f()
		took := time.Since(start)
		fmt.Printf("%-36s %9d %9.1f\n", name, count(), took.Seconds())
		if verbose && log != nil {
			for _, r := range log() {
				fmt.Println("   ", r)
			}
		}
		if err != nil {
			fmt.Printf("  (%s failed: %v)\n", name, err)
		}
	}
	measure("manage (validate, firmware, BIOS)", func() error {
		if err := d.Validate(ctx); err != nil {
			return err
		}
		if _, err := d.FirmwareComponents(ctx); err != nil {
			return err
		}
		_, err := d.BIOSSettings(ctx)
		return err
	})
	measure("inspect (out of band)", func() error {
		_, err := d.InspectOOB(ctx)
		return err
	})
	measure("power off", func() error { return d.SetPower(ctx, protocol.PowerOff) })
	measure("power on", func() error { return d.SetPower(ctx, protocol.PowerOn) })
	return nil
}
