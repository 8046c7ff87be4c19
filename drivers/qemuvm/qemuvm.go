// Package qemuvm is a development BMC that powers a QEMU virtual machine:
// power on starts QEMU (with the ramdisk's kernel and initramfs by direct
// kernel boot when the boot device is pxe, from its disk otherwise), power
// off kills it. It lets tests run the real ramdisk on a real (virtual)
// disk before the Redfish and IPMI drivers exist. It must never listen on
// a network address: the guest uses user-mode networking only.
package qemuvm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/bmedge/bmedge/protocol"
)

// Config says how to run the VM.
type Config struct {
	QEMU   string // qemu-system-x86_64
	Kernel string // ramdisk kernel
	Initrd string // ramdisk initramfs
	Disk   string // raw disk image
	Serial string // disk serial (serial=)
	// DiskBlkdebug, if set, is a QEMU blkdebug configuration file put
	// between the disk and its image, so that tests can make the disk
	// return I/O errors (e.g. [inject-error] on read_aio at a sector).
	DiskBlkdebug string
	// NVMeDisk, if set, is a second raw disk image behind an emulated
	// NVMe controller, with serial NVMeSerial.
	NVMeDisk, NVMeSerial string
	// QMP, if set, is a unix socket path for QEMU's machine protocol, so
	// that tests can reset the VM as a crash or a watchdog would.
	QMP string
	// HostFwd, if set, forwards a port of the host's loopback to the
	// guest (QEMU user networking's hostfwd), "tcp:127.0.0.1:HOSTPORT-:GUESTPORT",
	// so that another VM reaches a service of this one at 10.0.2.2:HOSTPORT.
	HostFwd  string
	MemoryMB int
	CPUs     int
	// Cmdline returns the kernel parameters for the ramdisk (bm.node=...).
	Cmdline func() string
	// Console receives the serial console (a log file).
	Console string
	// SerialSocket, if set, is a unix socket path where the VM's serial
	// port is also served (QEMU's chardev socket server, Console its log
	// file: the log keeps everything whether or not anyone is connected;
	// one client at a time). It is what a simulated BMC's console
	// connects to.
	SerialSocket string
}

var hostFwdRE = regexp.MustCompile(`^tcp:127\.0\.0\.1:[0-9]{1,5}-:[0-9]{1,5}$`)

// BMC powers one VM.
type BMC struct {
	cfg  Config
	mu   sync.Mutex
	boot string
	cmd  *exec.Cmd
	done chan struct{}
}

// New returns a powered-off VM that boots from its disk.
// BootsRamdiskItself implements drivers.SelfBooter: the VM is started with the ramdisk on its command line.
func (b *BMC) BootsRamdiskItself() {}

func New(cfg Config) *BMC {
	if cfg.QEMU == "" {
		cfg.QEMU = "qemu-system-x86_64"
	}
	if cfg.MemoryMB == 0 {
		cfg.MemoryMB = 1024
	}
	if cfg.CPUs == 0 {
		cfg.CPUs = 1
	}
	return &BMC{cfg: cfg, boot: protocol.BootDisk}
}

// Validate implements drivers.BMC: the files the VM needs exist.
func (b *BMC) Validate(ctx context.Context) error {
	files := []string{b.cfg.Kernel, b.cfg.Initrd, b.cfg.Disk}
	if b.cfg.DiskBlkdebug != "" {
		files = append(files, b.cfg.DiskBlkdebug)
	}
	if b.cfg.NVMeDisk != "" {
		files = append(files, b.cfg.NVMeDisk)
	}
	if b.cfg.HostFwd != "" && !hostFwdRE.MatchString(b.cfg.HostFwd) {
		return fmt.Errorf("qemu BMC: qemu_hostfwd %q: want tcp:127.0.0.1:HOSTPORT-:GUESTPORT", b.cfg.HostFwd)
	}
	for _, f := range files {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("qemu BMC: %v", err)
		}
	}
	if _, err := exec.LookPath(b.cfg.QEMU); err != nil {
		return fmt.Errorf("qemu BMC: %s not found: %v", b.cfg.QEMU, err)
	}
	return nil
}

func (b *BMC) running() bool {
	if b.done == nil {
		return false
	}
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

func (b *BMC) stopLocked() {
	if b.running() {
		_ = b.cmd.Process.Signal(syscall.SIGKILL)
		<-b.done
	}
}

// startLocked starts QEMU. A reboot from inside the guest restarts the
// VM with the same kernel, initramfs and command line, as a node would
// boot the ramdisk again over the network: the crash-only ramdisk comes
// back clean. Power-off from inside ends QEMU.
func (b *BMC) startLocked() error {
	drive0 := fmt.Sprintf("if=none,id=d0,file=%s,format=raw", b.cfg.Disk)
	if b.cfg.DiskBlkdebug != "" {
		drive0 = fmt.Sprintf("if=none,id=d0,driver=raw,file.driver=blkdebug,file.config=%s,file.image.driver=file,file.image.filename=%s", b.cfg.DiskBlkdebug, b.cfg.Disk)
	}
	netdev := "user,id=n0"
	if b.cfg.HostFwd != "" {
		netdev += ",hostfwd=" + b.cfg.HostFwd
	}
	args := []string{"-m", strconv.Itoa(b.cfg.MemoryMB), "-smp", strconv.Itoa(b.cfg.CPUs), "-nographic",
		"-display", "none", "-monitor", "none",
		// Debian's QEMU refuses serial= on -drive: give it to the device.
		"-drive", drive0,
		"-device", "virtio-blk-pci,drive=d0,serial=" + b.cfg.Serial,
		"-device", "virtio-rng-pci", "-netdev", netdev, "-device", "virtio-net-pci,netdev=n0"}
	if b.cfg.SerialSocket != "" {
		_ = os.Remove(b.cfg.SerialSocket)
		args = append(args, "-chardev", "socket,id=serial0,path="+b.cfg.SerialSocket+",server=on,wait=off,logfile="+b.cfg.Console,
			"-serial", "chardev:serial0")
	} else {
		args = append(args, "-serial", "file:"+b.cfg.Console)
	}
	if b.cfg.QMP != "" {
		args = append(args, "-qmp", "unix:"+b.cfg.QMP+",server=on,wait=off")
	}
	if b.cfg.NVMeDisk != "" {
		serial := b.cfg.NVMeSerial
		if serial == "" {
			serial = "NVME0"
		}
		args = append(args, "-drive", fmt.Sprintf("if=none,id=d1,file=%s,format=raw", b.cfg.NVMeDisk),
			"-device", "nvme,drive=d1,serial="+serial)
	}
	if b.boot == protocol.BootPXE {
		// loglevel=4 keeps the kernel's own notices, among them the echo of
		// the command line with the node's broker password, off the serial
		// console; the agent's log goes to the console directly.
		cmdline := "console=ttyS0 panic=1 loglevel=4"
		if b.cfg.Cmdline != nil {
			cmdline += " " + b.cfg.Cmdline()
		}
		args = append(args, "-kernel", b.cfg.Kernel, "-initrd", b.cfg.Initrd, "-append", cmdline)
	} else {
		args = append(args, "-boot", "c")
	}
	if strings.Contains(strings.Join(args, " "), "-vnc") {
		return fmt.Errorf("qemu BMC: refusing to open a VNC listener")
	}
	cmd := exec.Command(b.cfg.QEMU, args...)
	// The VM dies with the agent, even when the agent is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("qemu BMC: start VM: %w", err)
	}
	b.cmd, b.done = cmd, make(chan struct{})
	done := b.done
	go func() { _ = cmd.Wait(); close(done) }()
	return nil
}

// SetPower implements drivers.BMC.
func (b *BMC) SetPower(ctx context.Context, state string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch state {
	case protocol.PowerOff:
		b.stopLocked()
		return nil
	case protocol.PowerOn:
		if b.running() {
			return nil
		}
		return b.startLocked()
	case protocol.PowerReboot:
		b.stopLocked()
		return b.startLocked()
	}
	return fmt.Errorf("qemu BMC: unknown power state %q", state)
}

// PowerState implements drivers.BMC.
func (b *BMC) PowerState(ctx context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running() {
		return protocol.PowerOn, nil
	}
	return protocol.PowerOff, nil
}

// SetBootDevice implements drivers.BMC.
func (b *BMC) SetBootDevice(ctx context.Context, device string) error {
	if device != protocol.BootPXE && device != protocol.BootDisk {
		return fmt.Errorf("qemu BMC: unknown boot device %q", device)
	}
	b.mu.Lock()
	b.boot = device
	b.mu.Unlock()
	return nil
}

// RunStep implements drivers.BMC: the VM has no BMC steps of its own.
func (b *BMC) RunStep(ctx context.Context, iface, step string, args map[string]any) error {
	return fmt.Errorf("qemu BMC has no step %s.%s", iface, step)
}

// Close powers the VM off.
func (b *BMC) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopLocked()
}
