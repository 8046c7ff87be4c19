package systest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bmedge/bmedge/agent/netboot/labnet"
	"github.com/bmedge/bmedge/drivers/redfish/vbmc"
)

// processMachine is a vbmc Machine whose start runs a shell command (the
// network-booting machine of netboot_machine_test.go, in its namespace)
// with BM_IPMISIM_BOOT set to the boot device the BMC resolved (pxe for
// the override target Pxe, disk otherwise), and whose power-off ends it,
// as ipmi_sim's power-on and power-off do. It has no virtual media: an
// insert fails (and is counted), so that a boot that should have been a
// network boot cannot pass for one.
type processMachine struct {
	cmd, log string

	mu      sync.Mutex
	on      bool
	next    vbmc.Boot
	proc    *exec.Cmd
	exited  chan struct{}
	starts  []vbmc.Boot
	inserts int
}

func (m *processMachine) Power(ctx context.Context, rt vbmc.ResetType) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch rt {
	case vbmc.ResetOn:
		if !m.on {
			return m.startLocked()
		}
	case vbmc.ResetForceOff, vbmc.ResetGracefulShutdown:
		m.stopLocked()
		m.on = false
	case vbmc.ResetForceRestart, vbmc.ResetGracefulRestart, vbmc.ResetPowerCycle:
		m.stopLocked()
		return m.startLocked()
	default:
		return fmt.Errorf("process machine: unknown reset type %q", rt)
	}
	return nil
}

func (m *processMachine) startLocked() error {
	boot := "disk"
	if m.next.Device == vbmc.BootPxe {
		boot = "pxe"
	}
	f, err := os.OpenFile(m.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	fmt.Fprintf(f, "process machine: start, boot device %s\n", boot)
	c := exec.Command("sh", "-c", m.cmd)
	c.Env = append(os.Environ(), "BM_IPMISIM_BOOT="+boot)
	c.Stdout, c.Stderr = f, f
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := c.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = c.Wait(); close(exited) }()
	m.proc, m.exited, m.on = c, exited, true
	m.starts = append(m.starts, m.next)
	return nil
}

// stopLocked ends the machine's process group: SIGTERM, SIGKILL after 5 s.
func (m *processMachine) stopLocked() {
	if m.proc == nil {
		return
	}
	pg := -m.proc.Process.Pid
	_ = syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(pg, syscall.SIGKILL)
		<-m.exited
	}
	m.proc = nil
}

func (m *processMachine) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopLocked()
	m.on = false
}

func (m *processMachine) PoweredOn() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.on
}

func (m *processMachine) SetBoot(ctx context.Context, b vbmc.Boot) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next = b
	return nil
}

func (m *processMachine) InsertMedia(ctx context.Context, slot vbmc.Slot, url string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.inserts++
	return errors.New("this machine boots from the network; it has no virtual media")
}

func (m *processMachine) EjectMedia(ctx context.Context, slot vbmc.Slot) error { return nil }

func (m *processMachine) counts() (starts []vbmc.Boot, inserts int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]vbmc.Boot(nil), m.starts...), m.inserts
}

// TestBMORedfishNetbootHost: a redfish host as BMO registers a
// redfish:// BMC (driver redfish, boot_interface ipxe, raid and firmware
// redfish) behind the virtual Redfish BMC, through BMO's calls from
// registration to active and back to deleted, with no request refused.
// The edge agent boots its ramdisk by network boot, as an ipmi node's:
// it sets the BMC's boot source override to Pxe and arms its network
// boot for the node's MAC; the BMC's power-on starts the machine of
// TestBMOIPMIHost (a UEFI PXE firmware, then iPXE, with busybox's DHCP
// client and curl) with the boot device the BMC resolved. Inspection,
// provide's cleaning, the deploy and the undeploy's cleaning each boot it
// from the network; the deployed node runs from its disk; nothing is
// inserted as virtual media.
func TestBMORedfishNetbootHost(t *testing.T) {
	if !labnet.Isolate(t) {
		return
	}
	const mac = "52:54:00:6b:3c:5a"
	rig := newNetbootRig(t, mac)
	m := &processMachine{cmd: rig.powerOn, log: filepath.Join(t.TempDir(), "machine.log"), next: vbmc.Boot{Device: vbmc.BootHdd, Mode: vbmc.ModeUEFI}}
	b, err := vbmc.New(vbmc.Config{Username: "root", Password: "calvin", Systems: []vbmc.SystemConfig{{Machine: m}}})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := vbmc.Serve(b, vbmc.ServeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); m.close(); b.Close() })
	t.Cleanup(func() {
		if t.Failed() {
			l, _ := os.ReadFile(m.log)
			t.Logf("the machine's log:\n%s", l)
		}
	})
	sys := b.SystemIDs()[0]
	h := &bmoHost{t: t, cl: bmoClient(t, rig.c), name: "metal3~redfish-pxe1", mac: mac,
		driver: "redfish", bootIface: "ipxe", raidIface: "redfish", firmwareIface: "redfish",
		driverInfo: map[string]any{"redfish_address": srv.URL, "redfish_username": "root", "redfish_password": "calvin",
			"redfish_system_id": "/redfish/v1/Systems/" + sys}}
	start := time.Now()
	h.register()
	if n := h.get(); n.BootInterface != "ipxe" || n.PowerInterface != "redfish" || n.ManagementInterface != "redfish" || n.DeployInterface != "direct" {
		t.Fatalf("redfish node interfaces: boot %q power %q management %q deploy %q; want ipxe, redfish, redfish, direct",
			n.BootInterface, n.PowerInterface, n.ManagementInterface, n.DeployInterface)
	}
	boots := func() int {
		l, _ := os.ReadFile(m.log)
		return bytes.Count(l, []byte("netboot machine: the kernel runs"))
	}
	h.inspect()
	if got := boots(); got != 1 {
		t.Fatalf("network boots of the ramdisk after inspection: %d, want 1", got)
	}
	h.provision("http://127.0.0.1:1/host1.raw", "b004fddf42c9888a32bf3f385b1ba84307a3cf8499944f654b992f1a519af29c")
	st, err := b.State(sys)
	if err != nil {
		t.Fatal(err)
	}
	if n := h.get(); n.PowerState != "power on" || !m.PoweredOn() || st.BootTarget != vbmc.BootHdd || st.BootEnabled != vbmc.OverrideContinuous {
		t.Fatalf("active: power_state %q, machine on %v, BMC's boot override %s (%s); want on, Hdd (Continuous)", n.PowerState, m.PoweredOn(), st.BootTarget, st.BootEnabled)
	}
	if got := boots(); got != 3 {
		t.Fatalf("network boots of the ramdisk when active: %d, want 3 (inspection, provide's cleaning, the deploy)", got)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if l, _ := os.ReadFile(m.log); bytes.Contains(l, []byte("netboot machine: booting the instance from the disk")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("active, but the machine did not start from its disk")
		}
	}
	h.deprovision()
	if got := boots(); got != 4 {
		t.Errorf("network boots of the ramdisk after deprovisioning: %d, want 4 (and the undeploy's cleaning)", got)
	}
	starts, inserts := m.counts()
	pxe := 0
	for _, s := range starts {
		if s.Device == vbmc.BootPxe {
			pxe++
		}
	}
	if inserts != 0 || pxe != 4 || m.PoweredOn() {
		t.Errorf("after deprovisioning: %d virtual media inserts, %d starts from the override Pxe (of %d), powered on %v; want none, 4, off", inserts, pxe, len(starts), m.PoweredOn())
	}
	t.Logf("BMO's redfish:// host (boot ipxe) from registration to deleted, four network boots: %.1fs", time.Since(start).Seconds())
}
