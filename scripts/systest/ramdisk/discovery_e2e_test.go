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
// The site's link to the coordinator is cut before the VM boots: the
// VM reports to the site and powers off while the coordinator cannot
// hear of it, and the node is enrolled only once the link returns.
// A switch on the site network (Debian's lldpd in a namespace of its
// own, its frames forwarded by the bridge) sends LLDP: the ramdisk hears
// it during discovery, and the node's port gets local_link_connection
// from it (switch_id the switch's chassis MAC, port_id its port,
// switch_info its system name), the plugin data parsed_lldp.
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
	lldpd := needLLDPD(t)
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
	l := newLab(t, labOptions{Netboot: site, NetKernel: kernel, NetInitrd: initrd, AgentLog: slog.New(tee), WAN: true})
	cl := l.cl
	if code := cl.Do("PATCH", "/v1/sites/lab", map[string]any{"discovery": true, "discovery_driver": "ipmi", "discovery_max_nodes": 3}, nil); code != 200 {
		t.Fatalf("PATCH: %d", code)
	}
	waitUntil(t, 10*time.Second, "the agent takes the configuration", func() bool {
		c, _, _ := l.agent.Discovery()
		return c.Enabled
	})
	sw := startLLDPSwitch(t, site, lldpd)
	// The WAN is down from before the VM boots until it has reported.
	l.wan.Cut()
	cut := time.Now()
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
	if tee.count("machine discovered", "mac="+vmMAC) == 0 {
		t.Fatal("the VM powered off but the edge agent logged no 'machine discovered'")
	}
	var s struct {
		Online          bool `json:"online"`
		Discovered      int  `json:"discovered"`
		DiscoveredNodes []struct {
			UUID string `json:"uuid"`
		} `json:"discovered_nodes"`
	}
	// Cut off (the coordinator says it has lost the site), the
	// coordinator has no node of it.
	waitUntil(t, 2*time.Minute, "the coordinator says the site is offline", func() bool {
		cl.Do("GET", "/v1/sites/lab", nil, &s)
		return !s.Online
	})
	if s.Discovered != 0 {
		t.Fatalf("%d discovered nodes while the site's link was down", s.Discovered)
	}
	var nodes struct {
		Nodes []testrig.Node `json:"nodes"`
	}
	if cl.Do("GET", "/v1/nodes", nil, &nodes); len(nodes.Nodes) != 0 {
		t.Fatalf("%d nodes while the site's link was down", len(nodes.Nodes))
	}
	l.wan.Restore()
	t.Logf("link down %s", time.Since(cut).Round(time.Second))
	waitUntil(t, 90*time.Second, "the node is enrolled after the link returned", func() bool {
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
			Address   string         `json:"address"`
			PXE       bool           `json:"pxe_enabled"`
			LocalLink map[string]any `json:"local_link_connection"`
		} `json:"ports"`
	}
	cl.Do("GET", "/v1/ports/detail?node_uuid="+n.UUID, nil, &ports)
	if len(ports.Ports) != 1 || ports.Ports[0].Address != vmMAC || !ports.Ports[0].PXE {
		t.Fatalf("ports %+v; want one, PXE-enabled, of %s", ports.Ports, vmMAC)
	}
	// The switch port, from the LLDP frame the ramdisk heard.
	if llc := ports.Ports[0].LocalLink; llc["switch_id"] != sw.chassis || llc["port_id"] != sw.port || llc["switch_info"] != sw.name || len(llc) != 3 {
		t.Fatalf("the port's local_link_connection %v; want switch_id %s, port_id %s, switch_info %s (lldpd's)", llc, sw.chassis, sw.port, sw.name)
	}
	var inv struct {
		Inventory struct {
			Interfaces []struct {
				MAC  string  `json:"mac_address"`
				LLDP [][]any `json:"lldp"`
			} `json:"interfaces"`
		} `json:"inventory"`
		PluginData map[string]any `json:"plugin_data"`
	}
	if code := cl.Do("GET", "/v1/nodes/"+n.UUID+"/inventory", nil, &inv); code != 200 {
		t.Fatalf("inventory: %d", code)
	}
	heard := false
	for _, i := range inv.Inventory.Interfaces {
		heard = heard || (i.MAC == vmMAC && len(i.LLDP) > 0)
	}
	parsed, _ := inv.PluginData["parsed_lldp"].(map[string]any)
	if !heard || len(parsed) != 1 || inv.PluginData["auto_discovered"] != true {
		t.Fatalf("the inventory's interfaces %+v and plugin data %v; want the LLDP frame on %s, its parsed_lldp, auto_discovered", inv.Inventory.Interfaces, inv.PluginData, vmMAC)
	}
	for _, p := range parsed {
		if pm, _ := p.(map[string]any); pm["switch_system_name"] != sw.name || pm["switch_port_id"] != sw.port {
			t.Fatalf("parsed_lldp %v; want system %s, port %s", parsed, sw.name, sw.port)
		}
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
	// Its PXE firmware asks again and again (UEFI: 4 tries); two of them
	// turned away, no offer made.
	waitUntil(t, 2*time.Minute, "the VM asks twice again by DHCP", func() bool {
		return tee.count("no answer to a MAC not being booted", "mac="+vmMAC) >= 2
	})
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

// needLLDPD is the path of Debian's lldpd; the test skips without it
// (fails under BM_REQUIRE_ALL=1).
func needLLDPD(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"lldpd", "/usr/sbin/lldpd"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("BM_REQUIRE_ALL") == "1" {
		t.Fatal("lldpd is missing (Debian package lldpd; scripts/install-test-deps.sh)")
	}
	t.Skip("lldpd is missing (Debian package lldpd; scripts/install-test-deps.sh)")
	return ""
}

// lldpSwitch is what the switch on the site network says of itself.
type lldpSwitch struct {
	chassis, port, name string
}

// startLLDPSwitch runs lldpd in a site host of its own (a switch, its
// port eth0 on the site's bridge), sending a frame every second; the
// bridge forwards LLDP's group address (group_fwd_mask bit 14), as
// a Linux bridge otherwise does not. lldpd starts with its
// configuration (-O) once its port has carrier, so that its first frame
// is the configured one. It stops when the test ends.
func startLLDPSwitch(t *testing.T, site *labnet.Net, lldpd string) lldpSwitch {
	t.Helper()
	sw := lldpSwitch{chassis: "52:54:00:5e:00:07", port: "Ethernet1/7", name: "leaf-07"}
	if out, err := exec.Command("ip", "link", "set", "dev", site.Bridge, "type", "bridge", "group_fwd_mask", "0x4000").CombinedOutput(); err != nil {
		t.Fatalf("bridge group_fwd_mask: %v %s", err, out)
	}
	h := site.Host(sw.chassis, "")
	waitUntil(t, 10*time.Second, "the switch's port has carrier", func() bool {
		out, _ := h.Run("cat", "/sys/class/net/eth0/operstate")
		return strings.TrimSpace(out) == "up"
	})
	// lldpcli reaches the socket as lldpd's unprivileged user: a folder
	// it may enter.
	dir, err := os.MkdirTemp("", "bmlldpsw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "lldpd.conf")
	text := fmt.Sprintf("configure system hostname %s\n"+
		"configure ports eth0 lldp portidsubtype local %s description \"rack 7 port 7\"\n"+
		"configure lldp tx-interval 1\n", sw.name, sw.port)
	// (Chmod: the coordinator's store sets a private umask for the
	// whole process.)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(conf, 0o644); err != nil {
		t.Fatal(err)
	}
	d := h.Command(lldpd, "-d", "-u", filepath.Join(dir, "lldpd.socket"), "-I", "eth0", "-O", conf)
	var logs strings.Builder
	d.Stdout, d.Stderr = &logs, &logs
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.Process.Kill()
		_ = d.Wait()
		if t.Failed() {
			t.Logf("lldpd's log:\n%s", logs.String())
		}
	})
	return sw
}
