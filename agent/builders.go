package agent

import (
	"fmt"
	"os"

	"github.com/bmedge/bmedge/agent/bmc"
	"github.com/bmedge/bmedge/drivers"
	"github.com/bmedge/bmedge/drivers/ipmi"
	"github.com/bmedge/bmedge/drivers/qemuvm"
	"github.com/bmedge/bmedge/drivers/redfish"
)

// builders build each driver of the registry (drivers.Builtin) for this
// agent, by the registry's driver name: a simulated BMC for the fake
// driver while the site has room, a QEMU VM for the development driver,
// the real BMC for ipmi and redfish. TestBuildersCoverRegistry keeps
// them and the registry the same list.
func (a *Agent) builders() map[string]bmc.Builder {
	str := func(info map[string]any, k string) string { v, _ := info[k].(string); return v }
	return map[string]bmc.Builder{
		"fake": {NoPowerSync: true, HealthSync: a.cfg.Sim.Health, New: func(node string, info map[string]any, have int) (drivers.BMC, error) {
			return a.sim.NewBMC(node, info, have) // a.sim is built after the BMC set
		}},
		"qemu-dev": {New: func(node string, info map[string]any, _ int) (drivers.BMC, error) {
			if a.cfg.QEMU.Kernel == "" {
				return nil, fmt.Errorf("edge agent of site %s has no ramdisk for qemu-dev nodes; start it with --qemu-kernel and --qemu-initrd", a.cfg.Site)
			}
			mem := 1024
			if v, ok := info["qemu_memory_mb"].(float64); ok {
				mem = int(v)
			}
			console := str(info, "qemu_console")
			if console == "" {
				console = os.DevNull
			}
			return qemuvm.New(qemuvm.Config{Kernel: a.cfg.QEMU.Kernel, Initrd: a.cfg.QEMU.Initrd, Disk: str(info, "qemu_disk"),
				Serial: str(info, "qemu_disk_serial"), NVMeDisk: str(info, "qemu_nvme_disk"), NVMeSerial: str(info, "qemu_nvme_serial"), DiskBlkdebug: str(info, "qemu_disk_blkdebug"), QMP: str(info, "qemu_qmp"), HostFwd: str(info, "qemu_hostfwd"), MemoryMB: mem, Console: console,
				Cmdline: func() string { return a.boot.RamdiskCmdline(node) }}), nil
		}},
		"ipmi": {New: func(_ string, info map[string]any, _ int) (drivers.BMC, error) {
			return ipmi.New(info, ipmi.Options{})
		}},
		"redfish": {New: func(_ string, info map[string]any, _ int) (drivers.BMC, error) {
			return redfish.New(info, redfish.Options{Logger: a.log})
		}},
	}
}
