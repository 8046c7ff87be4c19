package ramdisk_test

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/netboot/labnet"
	"github.com/bmedge/bmedge/drivers/ipmi/ipmisim"
	"github.com/bmedge/bmedge/scripts/systest/testrig"
)

// TestDiscoveryQEMU: a QEMU VM that is no node (its MAC is no port) on
// the site network of the test's own, with a BMC (ipmi_sim, on the VM's
// system interface through QEMU's ipmi-bmc-extern and isa-ipmi-kcs,
// its LAN address set with ipmitool), boots by network at a site with
// discovery on: the edge agent answers its UEFI firmware's PXE client,
// the real ramdisk boots in discovery mode, reads the BMC's address in
// band, reports its inventory to the site broker and powers the VM off
// (QEMU exits); the coordinator enrolls one node: in enroll,
// auto_discovered, driver ipmi with the BMC's address as ipmi_address, a
// PXE port of the VM's MAC, the VM's memory and CPUs in its properties,
// its inventory kept.
// Booted again, the VM is not answered (its MAC is the node's now) and
// no second node appears.
func TestDiscoveryQEMU(t *testing.T) {
	if testing.Short() {
		t.Skip("boots QEMU")
	}
	if !labnet.Isolate(t) {
		return
	}
	kernel, initrd := need(t)
	labnet.Need(t, "qemu-system-x86_64")
	if _, err := os.Stat(ovmfFirmware); err != nil {
		if os.Getenv("BM_REQUIRE_ALL") == "1" {
			t.Fatal("OVMF is missing (Debian package ovmf)")
		}
		t.Skip("OVMF is missing (Debian package ovmf)")
	}
	labnet.Need(t, "ipmitool")
	start := time.Now()
	site := labnet.New(t)
	kcs := testrig.FreeAddr(t)
	bmc := ipmisim.StartTest(t, ipmisim.Options{SerialKCS: kcs})
	const bmcIP = "10.254.7.9"
	if out, err := exec.Command("ipmitool", "-I", "lanplus", "-C", "3", "-H", bmc.Host, "-p", fmt.Sprint(bmc.Port), "-U", "admin", "-P", "password",
		"lan", "set", "1", "ipaddr", bmcIP).CombinedOutput(); err != nil {
		t.Fatalf("ipmitool lan set: %v %s", err, out)
	}
	kcsHost, kcsPort, _ := strings.Cut(kcs, ":")
	const vmMAC = "52:54:00:d1:5c:01"
	tee := &logTee{next: testrig.Logger(t).Handler()}
	l := newLab(t, labOptions{Netboot: site, NetKernel: kernel, NetInitrd: initrd, AgentLog: slog.New(tee)})
	cl := l.cl
	if code := cl.Do("PATCH", "/v1/sites/lab", map[string]any{"discovery": true, "discovery_driver": "ipmi", "discovery_max_nodes": 3}, nil); code != 200 {
		t.Fatalf("PATCH: %d", code)
	}
	waitUntil(t, 10*time.Second, "the agent takes the configuration", func() bool {
		c, _, _ := l.agent.Discovery()
		return c.Enabled
	})
	tap := site.Tap()
	vm := func(console string) vmSpec {
		return vmSpec{Firmware: ovmfFirmware, Console: console, Args: []string{"-device", "virtio-rng-pci",
			"-chardev", "socket,id=ipmi0,host=" + kcsHost + ",port=" + kcsPort + ",reconnect=10",
			"-device", "ipmi-bmc-extern,chardev=ipmi0,id=bmc0", "-device", "isa-ipmi-kcs,bmc=bmc0",
			"-netdev", "tap,id=n0,ifname=" + tap + ",script=no,downscript=no",
			"-device", "virtio-net-pci,netdev=n0,mac=" + vmMAC + ",romfile=,bootindex=1"}}
	}
	console := filepath.Join(t.TempDir(), "console.log")
	showConsole(t, console, 6144)
	_, done := startVM(t, vm(console))
	select {
	case <-done:
	case <-time.After(4 * time.Minute):
		t.Fatal("the VM did not power off within 4 minutes of its discovery boot")
	}
	t.Logf("discovery boot to power-off: %s", time.Since(start).Round(time.Second))
	consoleHas(t, console, "discovery: the site has the inventory; powering off")
	var s struct {
		Discovered      int `json:"discovered"`
		DiscoveredNodes []struct {
			UUID string `json:"uuid"`
		} `json:"discovered_nodes"`
	}
	waitUntil(t, 20*time.Second, "the node is enrolled", func() bool {
		cl.Do("GET", "/v1/sites/lab", nil, &s)
		return s.Discovered == 1
	})
	n := cl.Get(s.DiscoveredNodes[0].UUID)
	mem, _ := n.Properties["memory_mb"].(float64)
	if n.State != "enroll" || n.ConductorGroup != "lab" || n.InternalInfo["auto_discovered"] != true || n.PowerState != "power off" ||
		n.Properties["cpus"] != 1.0 || mem < 900 || mem > 1100 || n.DriverInfo["ipmi_address"] != bmcIP {
		t.Fatalf("discovered node: %+v", n)
	}
	var ports struct {
		Ports []struct {
			Address string `json:"address"`
		} `json:"ports"`
	}
	cl.Do("GET", "/v1/nodes/"+n.UUID+"/ports", nil, &ports)
	if len(ports.Ports) == 0 || !strings.Contains(fmt.Sprint(ports.Ports), vmMAC) {
		t.Fatalf("ports %+v; want one of %s", ports.Ports, vmMAC)
	}
	var inv map[string]any
	if code := cl.Do("GET", "/v1/nodes/"+n.UUID+"/inventory", nil, &inv); code != 200 {
		t.Fatalf("inventory: %d", code)
	}
	for _, want := range [][]string{{"network boot DHCP: ack", "mac=" + vmMAC, "pxe=true"}, {"network boot HTTP: script served", "node=discovery-525400d15c01"},
		{"machine discovered", "mac=" + vmMAC}} {
		if tee.count(want...) == 0 {
			t.Errorf("the edge agent's log has no line with %q", want)
		}
	}
	// Booted again: the MAC is the node's; its DHCP asks get no answer.
	waitUntil(t, 10*time.Second, "the agent knows the node's MAC", func() bool {
		c, _, _ := l.agent.Discovery()
		return strings.Contains(strings.Join(c.KnownMACs, ","), vmMAC)
	})
	acks := tee.count("network boot DHCP: offer", "mac="+vmMAC)
	console2 := filepath.Join(t.TempDir(), "console2.log")
	startVM(t, vm(console2))
	waitUntil(t, 90*time.Second, "the VM asks again by DHCP", func() bool {
		return tee.count("no answer to a MAC not being booted", "mac="+vmMAC) > 0
	})
	time.Sleep(3 * time.Second)
	if got := tee.count("network boot DHCP: offer", "mac="+vmMAC); got != acks {
		t.Fatalf("the VM's second boot was offered a lease (%d offers, %d before)", got, acks)
	}
	cl.Do("GET", "/v1/sites/lab", nil, &s)
	if s.Discovered != 1 {
		t.Fatalf("%d discovered nodes after the second boot", s.Discovered)
	}
	t.Logf("in all %s", time.Since(start).Round(time.Second))
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
